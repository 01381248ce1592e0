package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
)

// AckName is the file that holds the acknowledged mark as of the last
// group commit (see doc.go, "Acknowledged mark"). The manifest holds a
// mark too, but only as of its last checkpoint; this one is written and
// synced after each group's data and before any of its Appends returns,
// so every acknowledged frame is below it.
const AckName = "journal.ack"

const ackTemp = AckName + ".tmp"

// The ack file is two slots, each in a sector of its own so that a write
// torn by a crash damages one slot at most; they are written in turn and
// the valid one with the higher sequence number is the mark:
//
//	["TKQA"][u32 1][u64 seq][u64 segment][i64 offset][u32 crc32c(the 32 bytes before)]
const (
	ackSlotSize = 512
	ackFileSize = 2 * ackSlotSize
	ackRecSize  = 36
	ackMagic    = "TKQA"
	ackVersion  = 1
)

func encodeAck(b []byte, seq uint64, m Mark) {
	copy(b[0:4], ackMagic)
	binary.LittleEndian.PutUint32(b[4:8], ackVersion)
	binary.LittleEndian.PutUint64(b[8:16], seq)
	binary.LittleEndian.PutUint64(b[16:24], m.Segment)
	binary.LittleEndian.PutUint64(b[24:32], uint64(m.Offset))
	binary.LittleEndian.PutUint32(b[32:36], crc32.Checksum(b[:32], castagnoli))
}

func decodeAck(b []byte) (seq uint64, m Mark, ok bool) {
	if len(b) < ackRecSize || string(b[0:4]) != ackMagic || binary.LittleEndian.Uint32(b[4:8]) != ackVersion ||
		binary.LittleEndian.Uint32(b[32:36]) != crc32.Checksum(b[:32], castagnoli) {
		return 0, Mark{}, false
	}
	m = Mark{Segment: binary.LittleEndian.Uint64(b[16:24]), Offset: int64(binary.LittleEndian.Uint64(b[24:32]))}
	return binary.LittleEndian.Uint64(b[8:16]), m, m.Offset >= 0
}

// readAck reads the ack file's mark; ok is false when there is no ack
// file (a journal made before it existed, or created by this Open).
func (j *Journal) readAck() (m Mark, ok bool, err error) {
	name := join(j.dir, AckName)
	f, err := j.fs.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("journal: %w", err)
	}
	b := make([]byte, ackFileSize)
	n, _ := f.ReadAt(b, 0)
	var best uint64
	for slot := range 2 {
		if (slot+1)*ackSlotSize > n {
			break
		}
		if seq, mk, valid := decodeAck(b[slot*ackSlotSize:]); valid && (!ok || seq > best) {
			best, m, ok = seq, mk, true
		}
	}
	if !ok {
		// Each slot is written only while the other holds a valid
		// mark, and the file is created whole: neither valid is damage.
		f.Close()
		return m, false, &CorruptError{File: name, Offset: 0, Reason: "neither slot of the acknowledged mark is valid"}
	}
	j.ackF, j.ackSeq = f, best
	return m, true, nil
}

// createAck makes a new ack file holding m, whole or not at all: written
// to a temporary file, synced, renamed and the directory synced.
func (j *Journal) createAck(m Mark) error {
	tmp := join(j.dir, ackTemp)
	f, err := j.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: create %s: %w", AckName, err)
	}
	b := make([]byte, ackFileSize)
	encodeAck(b, 1, m)
	encodeAck(b[ackSlotSize:], 2, m)
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = j.fs.Rename(tmp, join(j.dir, AckName))
	}
	if err == nil {
		err = j.fs.SyncDir(j.dir)
	}
	if err == nil {
		j.ackF, err = j.fs.OpenFile(join(j.dir, AckName), os.O_RDWR, 0)
	}
	if err != nil {
		return fmt.Errorf("journal: create %s: %w", AckName, err)
	}
	j.ackSeq = 2
	return nil
}

// writeAck records m as the acknowledged mark: it overwrites the slot
// that does not hold the current mark and syncs, so that a crash in the
// middle leaves the current mark readable. Called by the writer (or by
// Open before the writer starts).
func (j *Journal) writeAck(m Mark) error {
	var b [ackRecSize]byte
	seq := j.ackSeq + 1
	encodeAck(b[:], seq, m)
	if _, err := j.ackF.WriteAt(b[:], int64(seq%2)*ackSlotSize); err != nil {
		return fmt.Errorf("journal: record the acknowledged mark: %w", err)
	}
	if err := j.ackF.Sync(); err != nil {
		return fmt.Errorf("journal: record the acknowledged mark: %w", err)
	}
	j.ackSeq = seq
	return nil
}

// later is the later of two marks.
func later(a, b Mark) Mark {
	if a.Segment > b.Segment || a.Segment == b.Segment && a.Offset > b.Offset {
		return a
	}
	return b
}
