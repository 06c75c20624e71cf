package wire

import (
	"time"

	"github.com/quorumbus/quorumbus/internal/binenc"
)

// BackupOp is the step a Backup call asks for. Append only.
type BackupOp uint8

// A partition's image travels between the node serving the admin API and the group's
// leader in chunks, so that neither side holds a whole partition: the leader spools the
// image to a scratch file, which the caller reads by offset (backup), or which the
// caller writes by offset and then commits (restore).
const (
	BackupOpen    BackupOp = iota + 1 // Group → ID, Size, Sum: snapshot the group led here to a scratch file
	BackupRead                        // ID, Offset → Data: at most MaxBackupChunk bytes of it
	BackupClose                       // ID: drop the scratch file
	RestoreWrite                      // ID, Group, Offset, Data: append to a restore's scratch file
	RestoreCommit                     // ID, Group, Size, Sum: check the scratch file and restore the group from it
	RestoreAbort                      // ID: drop a restore's scratch file
)

// MaxBackupChunk bounds the Data of one Backup call or reply.
const MaxBackupChunk = 1 << 20

// Backup is one step of a backup or restore of a partition group (BackupOp).
type Backup struct {
	Op      BackupOp
	Group   uint32
	ID      string
	Offset  int64
	Size    int64
	Sum     string // hex SHA-256 of the whole image
	Data    []byte
	Timeout time.Duration // what is left of the caller's deadline; 0: none
}

func (c *Backup) AppendTo(b []byte, _ ErrorCodec) []byte {
	b = append(b, byte(c.Op))
	b = binenc.AppendUvarint(b, uint64(c.Group))
	b = binenc.AppendString(b, c.ID)
	b = binenc.AppendVarint(b, c.Offset)
	b = binenc.AppendVarint(b, c.Size)
	b = binenc.AppendString(b, c.Sum)
	b = appendBytes(b, c.Data)
	return binenc.AppendVarint(b, int64(c.Timeout))
}

func (c *Backup) DecodeFrom(d *Decoder, _ ErrorCodec) {
	c.Op = BackupOp(d.Byte())
	c.Group = d.Uvarint32("group id")
	c.ID = d.Str()
	c.Offset, c.Size = d.Varint(), d.Varint()
	c.Sum = d.Str()
	c.Data = d.bytes()
	c.Timeout = d.duration()
}

// BackupReply answers a Backup call.
type BackupReply struct {
	ID   string
	Size int64
	Sum  string
	Data []byte
	Err  error
}

func (r *BackupReply) AppendTo(b []byte, ec ErrorCodec) []byte {
	b = binenc.AppendString(b, r.ID)
	b = binenc.AppendVarint(b, r.Size)
	b = binenc.AppendString(b, r.Sum)
	b = appendBytes(b, r.Data)
	return appendError(b, ec.ToWire(r.Err))
}

func (r *BackupReply) DecodeFrom(d *Decoder, ec ErrorCodec) {
	r.ID = d.Str()
	r.Size = d.Varint()
	r.Sum = d.Str()
	r.Data = d.bytes()
	if e := d.error(); e != nil {
		r.Err = ec.FromWire(e)
	}
}
