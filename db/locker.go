package db

import (
	"github.com/pressly/goose/v3/lock"
)

// newLocker returns goose's PostgreSQL advisory-lock session locker so that
// several processes running migrations at once apply them exactly once.
func newLocker() (lock.SessionLocker, error) {
	return lock.NewPostgresSessionLocker()
}
