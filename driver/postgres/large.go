package postgres

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/internal/groupcommit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Large writes (a stored response of a megabyte): pgx copies each
// argument into a buffer of encoded parameters, and the Bind message into
// the connection's write buffer, which grows by doubling; both are
// garbage once the statement is sent, and the collector's heap target
// grows with them. A committer sends a large write on its own, binding
// its byte slices as they are (bytea in binary format is the bytes
// themselves), so that only the write buffer's copy is made.

// largeWrite is the size of arguments from which a write is sent alone,
// without pgx's copy of its parameters.
const largeWrite = 64 << 10

// isLarge reports whether w's byte-slice arguments reach largeWrite. Only
// a statement without a row to scan qualifies (an Exec).
func isLarge(w *groupcommit.Write) bool {
	if w.Row != nil {
		return false
	}
	n := 0
	for _, a := range w.Args {
		if b, ok := a.([]byte); ok {
			n += len(b)
		}
	}
	return n >= largeWrite
}

// execLarge runs w as one autocommit statement on conn: its byte slices
// bound to bytea parameters go as they are, every other argument is
// encoded as pgx encodes it. It returns the rows affected.
func execLarge(ctx context.Context, conn *pgx.Conn, w *groupcommit.Write) (int64, error) {
	sd, err := conn.Prepare(ctx, w.Query, w.Query) // named by the text's digest, cached on the connection after the first
	if err != nil {
		return 0, err
	}
	if len(sd.ParamOIDs) != len(w.Args) {
		return 0, fmt.Errorf("statement takes %d parameters, given %d", len(sd.ParamOIDs), len(w.Args))
	}
	m := conn.TypeMap()
	values := make([][]byte, len(w.Args))
	formats := make([]int16, len(w.Args))
	for i, a := range w.Args {
		oid := sd.ParamOIDs[i]
		if b, ok := a.([]byte); ok && oid == pgtype.ByteaOID {
			if b == nil {
				continue // NULL
			}
			values[i], formats[i] = b, pgtype.BinaryFormatCode
			continue
		}
		formats[i] = m.FormatCodeForOID(oid)
		v, err := m.Encode(oid, formats[i], a, nil)
		if err != nil {
			return 0, err
		}
		values[i] = v
	}
	res := conn.PgConn().ExecPrepared(ctx, sd.Name, values, formats, nil).Read()
	return res.CommandTag.RowsAffected(), res.Err
}
