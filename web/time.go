package web

import "time"

// Timestamp formats t as OpenStack services do (Python's isoformat on an
// aware UTC datetime): "2026-11-22T02:20:34.123456+00:00", without the
// fraction when it is zero. A nil t gives nil (JSON null).
func Timestamp(t *time.Time) any {
	if t == nil {
		return nil
	}
	u := t.UTC()
	if u.Nanosecond()/1000 == 0 {
		return u.Format("2006-01-02T15:04:05+00:00")
	}
	return u.Format("2006-01-02T15:04:05.000000+00:00")
}
