package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// HeaderSize is the size of a frame header: u32 payload length, u32
// CRC32C of the payload, both little-endian.
const HeaderSize = 8

// MaxPayload bounds one frame. A length above it in a header is corruption,
// not a frame to allocate for.
const MaxPayload = 256 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C the frames use. The store uses it for bodies too.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Frame decoding errors.
var (
	// ErrShortFrame: the bytes end before the frame does.
	ErrShortFrame = errors.New("journal: frame runs past the end of the data")
	// ErrBadLength: the header's length is zero or above MaxPayload. Zero
	// is never written, so a zero-filled region never reads as frames.
	ErrBadLength = errors.New("journal: frame length out of range")
	// ErrChecksum: the payload does not match the header's CRC.
	ErrChecksum = errors.New("journal: frame checksum mismatch")
)

// AppendFrame appends the frame of payload to dst.
func AppendFrame(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, Checksum(payload))
	return append(dst, payload...)
}

// DecodeFrame decodes the frame at the start of b. It returns the payload
// (aliasing b) and the frame's total length.
func DecodeFrame(b []byte) (payload []byte, n int, err error) {
	if len(b) < HeaderSize {
		return nil, 0, ErrShortFrame
	}
	length := binary.LittleEndian.Uint32(b)
	if length == 0 || length > MaxPayload {
		return nil, 0, fmt.Errorf("%w: %d", ErrBadLength, length)
	}
	if uint64(len(b)-HeaderSize) < uint64(length) {
		return nil, 0, ErrShortFrame
	}
	payload = b[HeaderSize : HeaderSize+int(length)]
	if Checksum(payload) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, ErrChecksum
	}
	return payload, HeaderSize + int(length), nil
}
