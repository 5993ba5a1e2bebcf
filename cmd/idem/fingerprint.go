package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/url"
	"os"
	"strings"

	"github.com/idemdev/idem/fingerprint"
)

const fingerprintUsage = "idem fingerprint [--exclude PATH]... [--trim-space] [--collapse-space] [--nfc] [FILE]\n       idem fingerprint --http [--content-type TYPE] [--exclude PATH]... METHOD PATH[?QUERY] [FILE]"

func init() {
	register(command{
		name:    "fingerprint",
		usage:   fingerprintUsage,
		summary: "print the canonical form and fingerprint of a JSON request, or of an HTTP request as idem serve sees it",
		run:     runFingerprint,
	})
}

// runFingerprint reads one JSON document from FILE (or stdin when FILE is
// absent or "-") and prints its canonical form on one line and its
// fingerprint on the next: the same fingerprint the library computes with
// the same options, so an operator can check why two requests matched or
// did not. With --http it prints instead the text the gateway hashes for
// the request METHOD PATH[?QUERY] with that body, and its http-sha256
// fingerprint (fingerprint.HTTP, the function idemhttp uses).
func runFingerprint(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fingerprint", flag.ContinueOnError)
	var opts []fingerprint.Option
	var excludes []string
	fs.Func("exclude", "drop the field at `PATH`, an RFC 6901 JSON Pointer such as /params/request_id, before hashing;\na token * matches every array element or object member; repeatable (idem serve: --exclude)", func(p string) error {
		opts = append(opts, fingerprint.Exclude(p))
		excludes = append(excludes, p)
		return nil
	})
	trim := fs.Bool("trim-space", false, "trim leading and trailing white space in every string value")
	collapse := fs.Bool("collapse-space", false, "trim every string value and collapse inner runs of white space to one space")
	nfc := fs.Bool("nfc", false, "normalize every string value and object key to Unicode NFC")
	httpMode := fs.Bool("http", false, "fingerprint an HTTP request as idem serve and idemhttp do: print the gateway's\ncanonical input (method, escaped path, raw query, body fingerprint) and its http-sha256 hash")
	contentType := fs.String("content-type", "application/json", "with --http, the request's Content-Type `TYPE`")
	usage := func(w io.Writer) {
		fs.SetOutput(w)
		fmt.Fprintf(w, "Usage: %s\n\nReads one JSON document from FILE, or stdin if FILE is absent or -, and prints\nits canonical form on one line and its fingerprint on the next. The form is\nRFC 8785's, except that a number RFC 8785 would round to another value is\nkept exact; a note on stderr names each such number.\n\nWith --http, reads the body of the request METHOD PATH[?QUERY] from FILE, or\nstdin, and prints the text idem serve hashes (five lines: a version, the\nmethod, the escaped path, the raw query, the body's fingerprint), then its\nhttp-sha256 fingerprint: the one the gateway logs and stores, to explain a 422.\n\nFlags:\n", fingerprintUsage)
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
	if *httpMode && (*trim || *collapse || *nfc) {
		fmt.Fprintln(stderr, "idem fingerprint: --http takes only --exclude and --content-type (the gateway has no string normalizers)")
		return 2
	}
	contentTypeSet := false
	fs.Visit(func(f *flag.Flag) { contentTypeSet = contentTypeSet || f.Name == "content-type" })
	if !*httpMode && contentTypeSet {
		fmt.Fprintln(stderr, "idem fingerprint: --content-type needs --http")
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
	args = fs.Args()
	var req fingerprint.Request
	if *httpMode {
		if len(args) < 2 {
			fmt.Fprintln(stderr, "idem fingerprint: --http needs METHOD and PATH[?QUERY]; see idem fingerprint --help")
			return 2
		}
		u, err := url.ParseRequestURI(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "idem fingerprint: PATH %q: want a request target such as /charges?x=1: %v\n", args[1], err)
			return 2
		}
		mt, _, err := mime.ParseMediaType(*contentType)
		if err != nil {
			mt = "" // as the middleware: an unparsable Content-Type is none
		}
		req = fingerprint.Request{Method: args[0], Path: u.EscapedPath(), RawQuery: u.RawQuery, MediaType: mt}
		args = args[2:]
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "idem fingerprint: want at most one FILE, got %d\n", len(args))
		usage(stderr)
		return 2
	}

	name, in := "<stdin>", stdin
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			fmt.Fprintln(stderr, "idem fingerprint:", err)
			return 2
		}
		defer f.Close()
		name, in = args[0], f
	}
	data, err := io.ReadAll(in)
	if err != nil {
		fmt.Fprintf(stderr, "idem fingerprint: reading %s: %v\n", name, err)
		return 2
	}

	if *httpMode {
		return printHTTP(req, data, excludes, opts, name, stdout, stderr)
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

// printHTTP prints the text the gateway hashes for the request req with
// body data, then its fingerprint, and notes on the body's numbers. opts
// are the Exclude options of the pointers exclude.
func printHTTP(req fingerprint.Request, data []byte, exclude []string, opts []fingerprint.Option, name string, stdout, stderr io.Writer) int {
	req.Body = data
	input, err := fingerprint.HTTPInput(req, exclude)
	if se, ok := errors.AsType[*fingerprint.SyntaxError](err); ok {
		fmt.Fprintf(stderr, "idem fingerprint: %s:%d:%d: Content-Type is %s but the body is not JSON (the gateway answers 400): offset %d: %s\n", name, se.Line, se.Column, req.MediaType, se.Offset, se.Msg)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "idem fingerprint:", err)
		return 2
	}
	fp, _ := fingerprint.HTTP(req, exclude) // input computed above: no error
	fmt.Fprintf(stdout, "%s\n%s\n", input, fp)
	if bodyFP := input[strings.LastIndexByte(input, '\n')+1:]; strings.HasPrefix(bodyFP, fingerprint.Scheme+":") {
		if canonical, err := fingerprint.Canonicalize(data, opts...); err == nil {
			noteExactNumbers(stderr, canonical)
		}
	}
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
