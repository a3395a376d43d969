package db

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterUUID makes m encode github.com/google/uuid's UUID (alone, by
// pointer or in slices) as PostgreSQL's uuid in binary, 16 bytes, where
// pgx otherwise goes through its database/sql Valuer: a string formatted
// for every value and parsed again by the server, and for a []uuid.UUID a
// failed plan per element first (at 1,000,000 nodes a fifth of `node
// import`'s CPU was spent there). Every pool Open makes registers it.
func RegisterUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncodePlan}, m.TryWrapEncodePlanFuncs...)
}

// uuidValue is a uuid.UUID as pgtype's UUIDValuer.
type uuidValue uuid.UUID

func (u uuidValue) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: u, Valid: true}, nil }

type wrapUUIDEncodePlan struct{ next pgtype.EncodePlan }

func (p *wrapUUIDEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *wrapUUIDEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(uuidValue(value.(uuid.UUID)), buf)
}

func tryWrapUUIDEncodePlan(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &wrapUUIDEncodePlan{}, uuidValue(u), true
	}
	return nil, nil, false
}
