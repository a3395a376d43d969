// Package docs holds metalloc's documentation (README.md at the root,
// docs/*.md here) and the tests that keep it true: TestDocs runs every
// shell block of the Markdown, in order, against a stack started as
// `make run` starts it, and checks the output of transcripts; a block that
// cannot run here carries a marker saying why (docs/development.md,
// "Documentation that is tested").
package docs
