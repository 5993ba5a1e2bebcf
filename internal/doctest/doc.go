// Package doctest holds the tests that keep the documentation true: every Go
// block in README.md and docs/*.md compiles against today's API, and every
// documented idem command that can run offline runs. It has no code of its
// own; run it with
//
//	go test ./internal/doctest/
//
// A failure names the Markdown file and line, the block, and the compiler's
// error or the command's output.
//
// # Go blocks
//
// A ```go block that starts with a package clause is a whole file and is
// compiled alone. Any other block is a fragment; the fragments of one
// Markdown file are compiled together, one file each, in one package, so a
// later block may use what an earlier one declared:
//
//   - a block of declarations only (func, type, var, const, import) is
//     compiled as it is, at package level;
//   - any other block is compiled as a block statement in a function of
//     its own, func() (err error), so "return err" compiles; the variables
//     the block declares at its top level need not be used.
//
// Imports are found for the doc author: every package named in a selector
// (outbox.Message, http.Handler) that the block does not declare is
// imported, from this module's packages first, then the standard library,
// then the module's dependencies. Where a name is ambiguous (rand), write
// the import in the block. Fragments may use, without declaring them, these
// package-level variables (a realistic program has them at hand):
//
//	ctx  context.Context      db   *sql.DB         tx   *sql.Tx
//	l    *idem.Ledger         mux  *http.ServeMux
//	w    http.ResponseWriter  r    *http.Request
//
// Names that stand for the reader's own code (a message type, a handler,
// an account number) are declared for the compiler, unseen by the reader,
// in a comment on the line before the fence, compiled at package level in
// the block's file (the names must differ between the blocks of one file):
//
//	<!-- doctest: given
//	type Message struct{ ID string; Payload []byte }
//	var msg Message
//	-->
//
// A block that should not be compiled (pseudo-code, a sketch of a design,
// output) is marked on the line before its fence, with a reason:
//
//	<!-- doctest: skip (pseudo-code: the elided parts are named in the text) -->
//
// Prefer making the block compile; a skipped block can rot.
//
// # Shell blocks
//
// Each ```sh block runs in a new temporary directory holding an empty
// ledger at the default database (idem.db, made by idem migrate), line by
// line (a trailing backslash continues a line, # starts a comment), in
// bash with pipefail, with the idem built once from this module first on
// PATH and a time bound per command. "export" lines apply to the lines
// after them. A command passes when it exits 0; "idem serve" passes when
// it says it is listening, and is then stopped; a command that names a
// record (idem keys show, idem jobs retry, …) also passes when it says the
// empty ledger has no such record.
//
// Every line that is not run is skipped by an explicit rule in
// commandRules (commands_test.go), which the test logs with its reason:
// the test suite, go build, curl against a running gateway, throwaway
// PostgreSQL clusters (--db postgres), the reader's own service
// (--target), long runs (idem prove, idem bench). Rewrites keep the rest
// runnable offline: go run ./cmd/idem is the built idem; a database server
// at a documented address (postgres://host/…) becomes a SQLite file in the
// temporary directory; a path under examples/ is the repository's file;
// listen ports become 0, the host kept (a
// non-loopback address stays one), and serve without --listen gets
// 127.0.0.1:0. So a command's flags are still checked. The same skip
// marker as for Go blocks skips a whole shell block; add a rule rather than
// a marker when a new kind of command cannot run offline.
package doctest
