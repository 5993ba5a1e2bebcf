package kafka

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/inbox"
	"github.com/idemdev/idem/internal/crashpoint"
)

// DefaultMaxBatch is how many records of one partition a transaction holds
// when Config.MaxBatch is 0.
const DefaultMaxBatch = 100

// Handler applies one record's effect with tx, the transaction that also
// records the record in the inbox and the partition's next offset. It runs
// once per record id unless it returns an error; an error rolls the whole
// transaction back and stops the consumer (Run returns it), and the record
// is consumed again when a consumer next starts, from the stored offset.
// Do not commit or roll back tx.
type Handler func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error

// Config configures a Consumer. Seeds, Group and Topics are required.
type Config struct {
	// Seeds are the brokers to bootstrap from ("host:port").
	Seeds []string
	// Group is the Kafka consumer group, and the group the offsets are
	// stored under in the database.
	Group string
	// Topics are consumed by the group.
	Topics []string
	// ID names a record in the inbox: PositionID (the default), KeyID or
	// HeaderID. The inbox turns a second record with an id it has seen
	// into a no-op, and one with a different payload into a mismatch.
	ID func(r *kgo.Record) (string, error)
	// Source is the inbox source the records are recorded under. Default
	// "kafka/" + Group.
	Source string
	// MaxBatch bounds how many consecutive records of one partition share
	// a transaction (and one offset write). 1 commits every record on its
	// own. Default DefaultMaxBatch.
	MaxBatch int
	// OnMismatch, when set, runs in the transaction for a record whose id
	// was consumed before with a different payload (to write it to a
	// dead-letter table, say); its error stops the consumer as a Handler's
	// does. Unset, such a record is skipped: logged by the inbox, counted
	// in Stats.Mismatched, and its offset passed.
	OnMismatch func(ctx context.Context, tx *sql.Tx, r *kgo.Record, err *inbox.MismatchError) error
	// OnCommit, when set, is called after each transaction committed, with
	// its records in order (to count or report them; not to acknowledge:
	// the stored offset already is the acknowledgement). A crash between
	// the commit and this call skips it.
	OnCommit func(cs []Committed)
	// Inbox configures the inbox (payload hash, logger).
	Inbox *inbox.Config
	// Logger receives the consumer's own lines. Default slog.Default().
	Logger *slog.Logger
	// Options are extra franz-go options (TLS, SASL, timeouts), applied
	// after the consumer's own. Do not re-enable auto-commit: offsets
	// Kafka holds are never read back while the database has the
	// partition's offset.
	Options []kgo.Opt
}

// Stats counts what a consumer did since it was made.
type Stats struct {
	Processed  int64 // records whose handler ran and committed
	Duplicates int64 // records whose id the inbox had seen: skipped
	Mismatched int64 // records whose id was seen with another payload
}

// Committed is a record whose transaction committed, for Config.OnCommit.
type Committed struct {
	Record *kgo.Record
	// Duplicate: the inbox had the record's id, so the handler did not
	// run; Mismatch: with a different payload.
	Duplicate, Mismatch bool
}

// Consumer consumes Kafka topics in a consumer group and applies each
// record's effect exactly once in the database, storing the group's
// offsets in the same transactions as the effects.
type Consumer struct {
	l       *idem.Ledger
	in      *inbox.Inbox
	offsets driver.Offsets
	h       Handler
	cfg     Config
	log     *slog.Logger

	processed, duplicates, mismatched atomic.Int64
}

// NewConsumer makes a consumer on the ledger's database. The database must
// implement driver.Offsets (both of idem's drivers do).
func NewConsumer(l *idem.Ledger, cfg *Config, h Handler) (*Consumer, error) {
	if l == nil {
		return nil, &idem.InputError{Field: "ledger", Reason: "must not be nil"}
	}
	if h == nil {
		return nil, &idem.InputError{Field: "handler", Reason: "must not be nil"}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	switch {
	case len(c.Seeds) == 0:
		return nil, &idem.InputError{Field: "seeds", Reason: "at least one broker is required"}
	case c.Group == "":
		return nil, &idem.InputError{Field: "group", Reason: "must not be empty"}
	case len(c.Topics) == 0:
		return nil, &idem.InputError{Field: "topics", Reason: "at least one topic is required"}
	case c.MaxBatch < 0:
		return nil, &idem.InputError{Field: "max batch", Reason: fmt.Sprintf("%d must not be negative", c.MaxBatch)}
	}
	off, ok := l.Driver().(driver.Offsets)
	if !ok {
		return nil, fmt.Errorf("kafka: the %s driver cannot store offsets (driver.Offsets)", l.Driver().Name())
	}
	if c.ID == nil {
		c.ID = PositionID
	}
	c.Source = cmp.Or(c.Source, "kafka/"+c.Group)
	c.MaxBatch = cmp.Or(c.MaxBatch, DefaultMaxBatch)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	in, err := inbox.New(l, c.Inbox)
	if err != nil {
		return nil, err
	}
	return &Consumer{l: l, in: in, offsets: off, h: h, cfg: c, log: c.Logger}, nil
}

// Stats returns the consumer's counts so far.
func (c *Consumer) Stats() Stats {
	return Stats{Processed: c.processed.Load(), Duplicates: c.duplicates.Load(), Mismatched: c.mismatched.Load()}
}

// Run joins the group and consumes until ctx ends (then it leaves the
// group and returns nil) or a record cannot be consumed (then it returns
// the error; the record is consumed again from the stored offset by the
// next Run, here or in another process). Fetch and group errors that
// franz-go retries by itself (a member that missed its session timeout
// rejoins) are logged as warnings, and consuming goes on.
//
// On every assignment the consumer starts each partition at the offset
// the database holds for it, not at what Kafka holds; a partition the
// database has never seen starts where franz-go's reset offset says (the
// start of the log unless Options change it). Offsets are never committed
// to Kafka.
func (c *Consumer) Run(ctx context.Context) error {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.cfg.Seeds...),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(c.adjust),
	}
	cl, err := kgo.NewClient(append(opts, c.cfg.Options...)...)
	if err != nil {
		return fmt.Errorf("kafka: client: %w", err)
	}
	defer func() {
		cl.AllowRebalance() // a poll still holding the rebalance would block Close
		cl.Close()          // leaves the group
	}()
	for {
		fs := cl.PollRecords(ctx, 0)
		if ctx.Err() != nil {
			return nil
		}
		if err := c.fetchErrs(ctx, fs); err != nil {
			return err
		}
		var perr error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if perr == nil {
				perr = c.partition(ctx, p.Records)
			}
		})
		cl.AllowRebalance()
		if perr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return perr
		}
	}
}

// fetchErrs logs the errors of a poll, which franz-go retries on its own
// (a member kicked out of the group rejoins, say), and returns the one
// error that ends consuming: the client is closed.
func (c *Consumer) fetchErrs(ctx context.Context, fs kgo.Fetches) error {
	var err error
	fs.EachError(func(t string, p int32, e error) {
		switch {
		case errors.Is(e, kgo.ErrClientClosed):
			err = fmt.Errorf("kafka: %w", e)
		case errors.Is(e, context.Canceled):
		default:
			c.log.LogAttrs(ctx, slog.LevelWarn, "kafka fetch error; the client retries",
				slog.String("group", c.cfg.Group), slog.String("topic", t), slog.Int("partition", int(p)), slog.String("err", e.Error()))
		}
	})
	return err
}

// adjust replaces the offsets Kafka holds for newly assigned partitions
// with those stored in the database.
func (c *Consumer) adjust(ctx context.Context, in map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	topics := make([]string, 0, len(in))
	for t := range in {
		topics = append(topics, t)
	}
	stored, err := c.offsets.OffsetsLoad(ctx, c.cfg.Group, topics)
	if err != nil {
		return nil, fmt.Errorf("kafka: load offsets of group %s: %w", c.cfg.Group, err)
	}
	for t, ps := range in {
		for p := range ps {
			if next, ok := stored[t][p]; ok {
				ps[p] = kgo.NewOffset().At(next).WithEpoch(-1)
			}
		}
	}
	return in, nil
}

// partition consumes one partition's polled records, MaxBatch at a time.
func (c *Consumer) partition(ctx context.Context, rs []*kgo.Record) error {
	for len(rs) > 0 {
		n := min(len(rs), c.cfg.MaxBatch)
		if err := c.batch(ctx, rs[:n]); err != nil {
			return err
		}
		rs = rs[n:]
	}
	return nil
}

// batch consumes consecutive records of one partition in one transaction
// with the partition's next offset.
func (c *Consumer) batch(ctx context.Context, rs []*kgo.Record) error {
	drv := c.l.Driver()
	tx, end, err := drv.Begin(ctx)
	if err != nil {
		return fmt.Errorf("kafka: begin: %w", err)
	}
	defer end()
	defer tx.Rollback()
	var processed, dups, mism int64
	var cs []Committed
	if c.cfg.OnCommit != nil {
		cs = make([]Committed, 0, len(rs))
	}
	for _, r := range rs {
		id, err := c.cfg.ID(r)
		if err != nil {
			return fmt.Errorf("kafka: record %s: %w", position(r), err)
		}
		dup, err := c.in.RecordTx(ctx, tx, c.cfg.Source, id, r.Value)
		var me *inbox.MismatchError
		switch {
		case errors.As(err, &me):
			mism++
			cs = appendIf(cs, Committed{Record: r, Duplicate: true, Mismatch: true})
			if c.cfg.OnMismatch != nil {
				if err := c.cfg.OnMismatch(ctx, tx, r, me); err != nil {
					return fmt.Errorf("kafka: record %s: %w", position(r), err)
				}
			}
			continue
		case err != nil:
			return fmt.Errorf("kafka: record %s: %w", position(r), err)
		case dup:
			dups++
			cs = appendIf(cs, Committed{Record: r, Duplicate: true})
			continue
		}
		if err := c.h(ctx, tx, r); err != nil {
			return fmt.Errorf("kafka: record %s: %w", position(r), err)
		}
		processed++
		cs = appendIf(cs, Committed{Record: r})
	}
	last := rs[len(rs)-1]
	ex, err := drv.Executor(tx)
	if err != nil {
		return err
	}
	if err := c.offsets.OffsetStore(ctx, ex, c.cfg.Group, last.Topic, last.Partition, last.Offset+1); err != nil {
		return fmt.Errorf("kafka: store offset %s: %w", position(last), err)
	}
	crashpoint.Hit(crashpoint.BeforeCommit)
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("kafka: commit through %s (outcome unknown; the next run finds out from the stored offset): %w", position(last), err)
	}
	crashpoint.Hit(crashpoint.AfterCommit)
	c.processed.Add(processed)
	c.duplicates.Add(dups)
	c.mismatched.Add(mism)
	if c.cfg.OnCommit != nil {
		c.cfg.OnCommit(cs)
	}
	return nil
}

// appendIf appends to cs unless nobody asked for it (cs nil).
func appendIf(cs []Committed, x Committed) []Committed {
	if cs == nil {
		return nil
	}
	return append(cs, x)
}

func position(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}
