package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/idemdev/idem/fingerprint"
)

const fingerprintUsage = "idem fingerprint [--exclude PATH]... [--trim-space] [--collapse-space] [--nfc] [FILE]"

func init() {
	register(command{
		name:    "fingerprint",
		usage:   fingerprintUsage,
		summary: "print the canonical form (RFC 8785) and fingerprint of a JSON request",
		run:     runFingerprint,
	})
}

// runFingerprint reads one JSON document from FILE (or stdin when FILE is
// absent or "-") and prints its canonical form on one line and its
// fingerprint on the next: the same fingerprint the library computes with
// the same options, so an operator can check why two requests matched or
// did not.
func runFingerprint(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fingerprint", flag.ContinueOnError)
	var opts []fingerprint.Option
	fs.Func("exclude", "drop the field at `PATH`, an RFC 6901 JSON Pointer such as /params/request_id, before hashing;\na token * matches every array element or object member; repeatable", func(p string) error {
		opts = append(opts, fingerprint.Exclude(p))
		return nil
	})
	trim := fs.Bool("trim-space", false, "trim leading and trailing white space in every string value")
	collapse := fs.Bool("collapse-space", false, "trim every string value and collapse inner runs of white space to one space")
	nfc := fs.Bool("nfc", false, "normalize every string value and object key to Unicode NFC")
	usage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "Usage: %s\n\nReads one JSON document from FILE, or stdin if FILE is absent or -, and prints\nits canonical form on one line and its fingerprint on the next. The form is\nRFC 8785's, except that a number RFC 8785 would round to another value is\nkept exact; a note on stderr names each such number.\n\nFlags:\n", fingerprintUsage)
		fs.PrintDefaults()
	}
	// The flag package prints usage on its own on errors and on --help, to
	// one writer; silence it and print to stdout or stderr as the case is.
	fs.SetOutput(io.Discard)
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout)
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "idem fingerprint:", err)
		usage(stderr)
		return 2
	}
	if *trim {
		opts = append(opts, fingerprint.TrimSpace())
	}
	if *collapse {
		opts = append(opts, fingerprint.CollapseSpace())
	}
	if *nfc {
		opts = append(opts, fingerprint.NFC())
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(stderr, "idem fingerprint: want at most one FILE, got %d\n", fs.NArg())
		usage(stderr)
		return 2
	}

	name, in := "<stdin>", stdin
	if fs.NArg() == 1 && fs.Arg(0) != "-" {
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			fmt.Fprintln(stderr, "idem fingerprint:", err)
			return 2
		}
		defer f.Close()
		name, in = fs.Arg(0), f
	}
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(stderr, "idem fingerprint: reading %s: %v\n", name, err)
		return 2
	}

	canonical, err := fingerprint.Canonicalize(data, opts...)
	if se, ok := errors.AsType[*fingerprint.SyntaxError](err); ok {
		fmt.Fprintf(stderr, "idem fingerprint: %s:%d:%d: invalid JSON at offset %d: %s\n", name, se.Line, se.Column, se.Offset, se.Msg)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem fingerprint:", err)
		return 2
	}
	fmt.Fprintf(stdout, "%s\n%s\n", canonical, fingerprint.Hash(canonical))
	noteExactNumbers(stderr, canonical)
	return 0
}

// noteExactNumbers prints a note for each number of canonical that is kept
// as its exact decimal where RFC 8785 would round it, so that the
// deviation is never a surprise. Notes go to stderr: stdout stays the
// canonical form and the fingerprint.
func noteExactNumbers(stderr io.Writer, canonical []byte) {
	exact, err := fingerprint.ExactNumbers(canonical)
	if err != nil {
		return // canonical came from Canonicalize; it parses
	}
	for _, n := range exact {
		pointer := n.Pointer
		if pointer == "" {
			pointer = "(the document)"
		}
		rfc := "RFC 8785 would write " + n.RFC8785
		if n.RFC8785 == "" {
			rfc = "RFC 8785 has no form for it (beyond the float64 range)"
		}
		fmt.Fprintf(stderr, "note: %s: %s kept exact; %s (see docs/contract.md)\n", pointer, n.Exact, rfc)
	}
}
