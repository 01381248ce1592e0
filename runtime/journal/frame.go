package journal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// HeaderSize is the size of a frame header, all little-endian: u32 payload
// length, u32 header CRC, u32 payload CRC. The header has a checksum of its
// own so that recovery, which must scan byte by byte past a bad frame for
// any valid one, rejects a false start with a 20-byte CRC instead of a CRC
// over everything that follows (quadratic on a large damaged segment).
const HeaderSize = 12

// MaxPayload bounds one frame. A length above it in a header is corruption,
// not a frame to allocate for.
const MaxPayload = 256 << 20

// The segment header is the first SegmentHeaderSize bytes of every
// segment. It is shaped like a frame (so that tools which walk the length
// prefixes of what the journal writes step over it), checksummed with the
// plain CRC32C of its body, since it carries the salt:
//
//	[u32 16][u32 crc32c(body)][u32 crc32c(body)] body: ["TKQJ"][u32 FormatVersion][u64 salt]
const (
	SegmentHeaderSize = HeaderSize + segmentBodySize
	segmentBodySize   = 16
	segmentMagic      = "TKQJ"
)

// FormatVersion is the on-disk format the journal writes. Format 3 added
// the manifest (journal.json); a journal of format 2 segments and no
// manifest is migrated when opened (see listSegments).
const FormatVersion = 3

// oldestFormat is the oldest segment format Open still reads.
const oldestFormat = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is plain CRC32C. The store uses it for message bodies.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Frame decoding errors.
var (
	// ErrShortFrame: the bytes end before the frame does.
	ErrShortFrame = errors.New("journal: frame runs past the end of the data")
	// ErrBadLength: the header's length is zero or above MaxPayload. Zero
	// is never written, so a zero-filled region never reads as frames.
	ErrBadLength = errors.New("journal: frame length out of range")
	// ErrChecksum: the frame does not match the header's CRC.
	ErrChecksum = errors.New("journal: frame checksum mismatch")
	// ErrSegmentHeader: a segment does not start with a valid header.
	ErrSegmentHeader = errors.New("journal: bad segment header")
)

// headerCRC is the checksum of a frame header: CRC32C over the segment's
// salt (u64), the frame's offset in the segment (u64) and the payload
// length (u32), all little-endian. The salt is random per segment and never
// leaves the disk, so bytes inside a payload — which a client controls —
// cannot be made to validate as a frame of the segment (short of guessing a
// 32-bit value blind); the offset makes even a verbatim copy of a real frame
// of the same segment fail anywhere but where that frame lies. The payload
// has its own plain CRC32C: a header that validates was written by this
// segment's journal at this offset, so the payload check only has to catch
// a torn or damaged payload.
func headerCRC(salt uint64, off int64, length uint32) uint32 {
	var pre [20]byte
	binary.LittleEndian.PutUint64(pre[0:], salt)
	binary.LittleEndian.PutUint64(pre[8:], uint64(off))
	binary.LittleEndian.PutUint32(pre[16:], length)
	return crc32.Checksum(pre[:], castagnoli)
}

// AppendFrame appends to dst the frame of payload that starts at offset off
// of a segment whose salt is salt.
func AppendFrame(dst []byte, salt uint64, off int64, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, headerCRC(salt, off, uint32(len(payload))))
	dst = binary.LittleEndian.AppendUint32(dst, Checksum(payload))
	return append(dst, payload...)
}

// DecodeFrame decodes the frame at the start of b, which lies at offset off
// of a segment whose salt is salt. It returns the payload (aliasing b) and
// the frame's total length. The header is checked before anything that
// depends on its length, so a false start costs a 20-byte CRC.
func DecodeFrame(b []byte, salt uint64, off int64) (payload []byte, n int, err error) {
	if len(b) < HeaderSize {
		return nil, 0, ErrShortFrame
	}
	length := binary.LittleEndian.Uint32(b)
	if length == 0 || length > MaxPayload {
		return nil, 0, fmt.Errorf("%w: %d", ErrBadLength, length)
	}
	if headerCRC(salt, off, length) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, fmt.Errorf("%w: header", ErrChecksum)
	}
	if uint64(len(b)-HeaderSize) < uint64(length) {
		return nil, 0, ErrShortFrame
	}
	payload = b[HeaderSize : HeaderSize+int(length)]
	if Checksum(payload) != binary.LittleEndian.Uint32(b[8:]) {
		return nil, 0, fmt.Errorf("%w: payload", ErrChecksum)
	}
	return payload, HeaderSize + int(length), nil
}

// newSalt draws a segment salt. crypto/rand does not fail on the systems
// Go supports.
func newSalt() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// AppendSegmentHeader appends the header of a segment of salt to dst.
func AppendSegmentHeader(dst []byte, salt uint64) []byte {
	return appendSegmentHeader(dst, salt, FormatVersion)
}

func appendSegmentHeader(dst []byte, salt uint64, version uint32) []byte {
	var body [segmentBodySize]byte
	copy(body[:], segmentMagic)
	binary.LittleEndian.PutUint32(body[4:], version)
	binary.LittleEndian.PutUint64(body[8:], salt)
	dst = binary.LittleEndian.AppendUint32(dst, segmentBodySize)
	dst = binary.LittleEndian.AppendUint32(dst, Checksum(body[:]))
	dst = binary.LittleEndian.AppendUint32(dst, Checksum(body[:]))
	return append(dst, body[:]...)
}

// ParseSegmentHeader checks the segment header at the start of b and
// returns the segment's salt. Errors wrap ErrSegmentHeader.
func ParseSegmentHeader(b []byte) (salt uint64, err error) {
	salt, v, err := parseSegmentHeader(b)
	if err == nil && v != FormatVersion {
		return 0, fmt.Errorf("%w: format version %d, want %d", ErrSegmentHeader, v, FormatVersion)
	}
	return salt, err
}

// parseSegmentHeader is ParseSegmentHeader for every format Open reads,
// returning the segment's format version too.
func parseSegmentHeader(b []byte) (salt uint64, version int, err error) {
	switch {
	case len(b) < SegmentHeaderSize:
		return 0, 0, fmt.Errorf("%w: %d bytes, want %d", ErrSegmentHeader, len(b), SegmentHeaderSize)
	case binary.LittleEndian.Uint32(b) != segmentBodySize:
		return 0, 0, fmt.Errorf("%w: length %d", ErrSegmentHeader, binary.LittleEndian.Uint32(b))
	}
	body := b[HeaderSize:SegmentHeaderSize]
	switch {
	case Checksum(body) != binary.LittleEndian.Uint32(b[4:]) || Checksum(body) != binary.LittleEndian.Uint32(b[8:]):
		return 0, 0, fmt.Errorf("%w: checksum mismatch", ErrSegmentHeader)
	case string(body[:4]) != segmentMagic:
		return 0, 0, fmt.Errorf("%w: magic %q", ErrSegmentHeader, body[:4])
	case binary.LittleEndian.Uint32(body[4:]) < oldestFormat || binary.LittleEndian.Uint32(body[4:]) > FormatVersion:
		return 0, 0, fmt.Errorf("%w: format version %d, this build reads %d to %d", ErrSegmentHeader, binary.LittleEndian.Uint32(body[4:]), oldestFormat, FormatVersion)
	}
	return binary.LittleEndian.Uint64(body[8:]), int(binary.LittleEndian.Uint32(body[4:])), nil
}
