// Package conductor is metalloc-conductor's engine: it registers the process
// in the conductors table and heartbeats, listens for new work
// (LISTEN metalloc_allocations, with a poll interval as fallback), and runs a
// fixed pool of workers. Each worker claims unowned allocating rows in
// batches (FOR UPDATE SKIP LOCKED) and reserves a node for each in the same
// transaction (allocation.Allocator.ClaimReserve); rows with no node free at
// that moment are claimed and processed one by one (Allocator.Process). At
// start-up it resumes its own unfinished rows. Several conductors on one
// database never process the same row: claims skip locked rows and every
// later write is a compare-and-set on conductor_affinity.
//
// # Liveness
//
// A conductor row is live while online and its heartbeat_at is younger than
// heartbeat_timeout; a second process with the same hostname refuses to start
// while the first is live. A clean stop waits for in-flight work, then marks
// the row offline.
package conductor
