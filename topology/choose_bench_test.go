package topology

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkChoose10k: Choose for a group of 8 or 64, required rack or
// preferred, on 10,000 free candidates in 10 rows of 25 racks of 40.
func BenchmarkChoose10k(b *testing.B) {
	var cands []Candidate
	for i := range 10000 {
		cands = append(cands, Candidate{ID: int64(i + 1), Path: []string{strconv.Itoa(i / 1000), strconv.Itoa(i / 40 % 25)}})
	}
	for _, bc := range []struct {
		name string
		req  Request
	}{
		{"required-8", Request{Count: 8, Rule: Required, Level: 1}},
		{"required-64-row", Request{Count: 64, Rule: Required, Level: 0}},
		{"preferred-64", Request{Count: 64, Rule: Preferred, Level: 1}},
		{"none-8", Request{Count: 8}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				if _, nf := Choose(rowRack, cands, bc.req, rng); nf != nil {
					b.Fatal(nf)
				}
			}
		})
	}
}
