// Package migrations embeds metalloc's goose SQL migrations. They are applied
// by `metalloc-manage db sync` (see package db) and, in tests, once per test
// run into a template database.
package migrations

import "embed"

// FS holds the numbered goose migration files (NNNNN_name.sql).
//
//go:embed *.sql
var FS embed.FS
