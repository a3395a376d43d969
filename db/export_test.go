package db

// Internals the external tests (package db_test) drive: Sync and the
// migration parser on a migration set of their own.
var (
	SyncFS          = syncFS
	ParseMigrations = parseMigrations
)
