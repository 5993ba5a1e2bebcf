package idemhttp

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/idemdev/idem"
)

// logOp writes one line about a guarded request. The key is always logged
// as idem.KeyHash: keys are chosen by clients and may carry personal data
// (an order number, an e-mail address); the hash still ties the lines of
// one key together, and `idem keys show` prints it for a key an operator
// holds.
func (g *guard) logOp(ctx context.Context, level slog.Level, msg string, op idem.Op, attempt int64, attrs ...slog.Attr) {
	if !g.cfg.log.Enabled(ctx, level) {
		return
	}
	base := []slog.Attr{
		slog.String("scope", op.Scope), slog.String("key", idem.KeyHash(op.Key)),
		slog.String("fingerprint", op.Fingerprint), slog.Int64("attempt", attempt),
	}
	g.cfg.log.LogAttrs(ctx, level, "idemhttp: "+msg, append(base, attrs...)...)
}

// warnSpill logs, at most once a minute, that a large response was held
// in memory because its temporary file failed (see recorder): with many
// such responses in flight the process holds them all.
func (g *guard) warnSpill(ctx context.Context, op idem.Op, attempt int64, err error) {
	now := time.Now().UnixNano()
	last := g.spillWarned.Load()
	if now-last < int64(time.Minute) || !g.spillWarned.CompareAndSwap(last, now) {
		return
	}
	g.logOp(ctx, slog.LevelWarn, "a large response is held in memory: its temporary file failed (see Options.SpillDir; logged once a minute at most)", op, attempt,
		slog.String("dir", cmp.Or(g.cfg.spillDir, os.TempDir())), slog.Any("err", err))
}
