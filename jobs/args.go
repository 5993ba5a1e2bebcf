package jobs

import (
	"encoding/json"
	"fmt"
)

// Args are a job's typed arguments. Kind names the job type and routes it
// to the Worker registered for it; it must be callable on the zero value
// (define it on a value receiver). Args are stored as JSON, unless they are
// Raw.
type Args interface {
	Kind() string
}

// Raw is an untyped job: Data is stored as it is (JSON or any bytes), under
// the kind Name. Register its worker with AddWorkerKind, since a zero Raw
// has no kind.
type Raw struct {
	Name string
	Data []byte
}

// Kind returns r.Name.
func (r Raw) Kind() string { return r.Name }

func (r Raw) rawData() []byte { return r.Data }

func (r *Raw) setRaw(kind string, data []byte) { r.Name, r.Data = kind, data }

// rawArgs is implemented by Raw: bytes stored as given, not JSON-encoded.
type rawArgs interface{ rawData() []byte }

// rawTarget is implemented by *Raw: bytes handed over as stored.
type rawTarget interface {
	setRaw(kind string, data []byte)
}

func encodeArgs(a Args) ([]byte, error) {
	if r, ok := a.(rawArgs); ok {
		return r.rawData(), nil
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode %s args: %w", a.Kind(), err)
	}
	return b, nil
}

func decodeArgs[T Args](kind string, b []byte) (T, error) {
	var v T
	if r, ok := any(&v).(rawTarget); ok {
		r.setRaw(kind, b)
		return v, nil
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("decode %s args: %w", kind, err)
	}
	return v, nil
}
