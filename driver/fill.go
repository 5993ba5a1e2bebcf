package driver

import (
	"context"
	"time"
)

// Filler fills a ledger in bulk with completed records, for benchmarks that
// measure idem on a ledger holding millions of keys (idem bench --rows
// scale). It writes the rows in a few large statements, bypassing group
// commit and the state machine: never call it on a ledger in use. Drivers
// that cannot fill in bulk need not implement it.
type Filler interface {
	// FillCompleted inserts p.N succeeded records and returns about
	// p.Sample of their (scope, key) pairs, drawn across the whole fill.
	FillCompleted(ctx context.Context, p FillParams) ([]FilledKey, error)
	// LedgerSize reports what the ledger takes on disk.
	LedgerSize(ctx context.Context) (Size, error)
}

// FillParams describes a bulk fill. Keys are random UUIDv4 strings; record
// i goes to scope Scope+"-"+(i mod Scopes).
type FillParams struct {
	N      int
	Scope  string
	Scopes int
	// Body is every record's stored response.
	Body []byte
	// Retention and TombstoneTTL are stored on every record, as a claim
	// would store them.
	Retention, TombstoneTTL time.Duration
	// Age is how long before now (the driver's clock) the records were
	// completed: an Age past Retention+TombstoneTTL fills records that the
	// next Prune tombstones and deletes.
	Age time.Duration
	// Sample is how many keys to return.
	Sample int
}

// FilledKey names one record a fill wrote.
type FilledKey struct{ Scope, Key string }

// Size is what a ledger takes on disk.
type Size struct {
	// Ledger is the bytes of the idem_keys table and its indexes.
	Ledger int64
	// File is the bytes of the whole database: the SQLite file's pages
	// (the WAL not counted), or PostgreSQL's pg_database_size.
	File int64
	// Free is the bytes of the SQLite file's free pages, which the file
	// keeps until a VACUUM; 0 on PostgreSQL.
	Free int64
	// How names how Ledger was measured.
	How string
}

// ScanFilledKey reads one (scope, key) row.
func ScanFilledKey(r Row) (FilledKey, error) {
	var k FilledKey
	err := r.Scan(&k.Scope, &k.Key)
	return k, err
}
