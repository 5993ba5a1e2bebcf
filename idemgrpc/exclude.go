package idemgrpc

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// withoutExcluded returns msg, or a copy of it with the Exclude fields
// cleared, for the fingerprint. The handler always gets msg itself.
func (c *config) withoutExcluded(msg proto.Message) proto.Message {
	if len(c.exclude) == 0 {
		return msg
	}
	cp := proto.Clone(msg)
	for _, path := range c.exclude {
		clearPath(cp.ProtoReflect(), path)
	}
	return cp
}

// clearPath clears the field at path (proto field names) in m, going
// through singular message fields; a path m does not have is skipped.
func clearPath(m protoreflect.Message, path []string) {
	for i, name := range path {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return
		}
		if i == len(path)-1 {
			m.Clear(fd)
			return
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() || !m.Has(fd) {
			return
		}
		m = m.Mutable(fd).Message()
	}
}
