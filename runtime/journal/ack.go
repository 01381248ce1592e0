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

// The ack file is two slots, each in a region of its own so that a write
// torn by a crash damages one slot at most; they are written in turn and
// the valid one with the higher sequence number is the mark. A slot also
// holds a copy of the group it acknowledges, the bytes [start, offset) of
// the segment (start == offset: none), so that the mark and the group's
// data can be synced at once (see doc.go, "Acknowledged mark"):
//
//	["TKQA"][u32 2][u64 seq][u64 segment][i64 offset][i64 start][u32 crc32c(copy)][u32 crc32c(the 44 bytes before)][copy]
//
// Format 1 had the first 36 bytes of that layout in 512-byte slots,
// without start and copy; Open reads it and replaces the file.
const (
	ackSlotSize = 64 << 10
	ackFileSize = 2 * ackSlotSize
	ackHdrSize  = 48
	ackCopyMax  = ackSlotSize - ackHdrSize
	ackMagic    = "TKQA"
	ackVersion  = 2

	ackV1SlotSize = 512
	ackV1FileSize = 2 * ackV1SlotSize
	ackV1RecSize  = 36
)

// ackSlot is what one slot holds.
type ackSlot struct {
	seq   uint64
	mark  Mark
	start int64  // where copy starts in mark.Segment
	copy  []byte // the segment's bytes [start, mark.Offset)
}

// encodeAck appends the slot of seq, m and the copy of [start, m.Offset) to dst.
func encodeAck(dst []byte, seq uint64, m Mark, start int64, data []byte) []byte {
	var b [ackHdrSize]byte
	copy(b[0:4], ackMagic)
	binary.LittleEndian.PutUint32(b[4:8], ackVersion)
	binary.LittleEndian.PutUint64(b[8:16], seq)
	binary.LittleEndian.PutUint64(b[16:24], m.Segment)
	binary.LittleEndian.PutUint64(b[24:32], uint64(m.Offset))
	binary.LittleEndian.PutUint64(b[32:40], uint64(start))
	binary.LittleEndian.PutUint32(b[40:44], crc32.Checksum(data, castagnoli))
	binary.LittleEndian.PutUint32(b[44:48], crc32.Checksum(b[:44], castagnoli))
	return append(append(dst, b[:]...), data...)
}

// decodeAck decodes the slot at the start of b; the copy aliases b.
func decodeAck(b []byte) (a ackSlot, ok bool) {
	if len(b) < ackHdrSize || string(b[0:4]) != ackMagic || binary.LittleEndian.Uint32(b[4:8]) != ackVersion ||
		binary.LittleEndian.Uint32(b[44:48]) != crc32.Checksum(b[:44], castagnoli) {
		return a, false
	}
	a.seq = binary.LittleEndian.Uint64(b[8:16])
	a.mark = Mark{Segment: binary.LittleEndian.Uint64(b[16:24]), Offset: int64(binary.LittleEndian.Uint64(b[24:32]))}
	a.start = int64(binary.LittleEndian.Uint64(b[32:40]))
	if a.start < 0 || a.mark.Offset < a.start || a.mark.Offset-a.start > int64(min(ackCopyMax, len(b)-ackHdrSize)) {
		return a, false
	}
	a.copy = b[ackHdrSize : ackHdrSize+int(a.mark.Offset-a.start)]
	return a, binary.LittleEndian.Uint32(b[40:44]) == crc32.Checksum(a.copy, castagnoli)
}

// decodeAckV1 decodes a slot of format 1 (no copy).
func decodeAckV1(b []byte) (a ackSlot, ok bool) {
	if len(b) < ackV1RecSize || string(b[0:4]) != ackMagic || binary.LittleEndian.Uint32(b[4:8]) != 1 ||
		binary.LittleEndian.Uint32(b[32:36]) != crc32.Checksum(b[:32], castagnoli) {
		return a, false
	}
	a.seq = binary.LittleEndian.Uint64(b[8:16])
	a.mark = Mark{Segment: binary.LittleEndian.Uint64(b[16:24]), Offset: int64(binary.LittleEndian.Uint64(b[24:32]))}
	a.start = a.mark.Offset
	return a, a.mark.Offset >= 0
}

// readAck reads the ack file's current slot; ok is false when there is
// no ack file (a journal made before it existed, or created by this
// Open). A file of format 1 is read too; j.ackV1 says Open must replace it.
func (j *Journal) readAck() (a ackSlot, ok bool, err error) {
	name := join(j.dir, AckName)
	f, err := j.fs.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("journal: %w", err)
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return a, false, fmt.Errorf("journal: %w", err)
	}
	slotSize, decode := ackSlotSize, decodeAck
	if size == ackV1FileSize {
		slotSize, decode, j.ackV1 = ackV1SlotSize, decodeAckV1, true
	}
	b := make([]byte, 2*slotSize)
	n, _ := f.ReadAt(b, 0)
	for slot := range 2 {
		if (slot+1)*slotSize > n {
			break
		}
		if got, valid := decode(b[slot*slotSize : (slot+1)*slotSize]); valid && (!ok || got.seq > a.seq) {
			a, ok = got, true
		}
	}
	if !ok {
		// Each slot is written only while the other holds a valid
		// mark, and the file is created whole: neither valid is damage.
		f.Close()
		return a, false, &CorruptError{File: name, Offset: 0, Reason: "neither slot of the acknowledged mark is valid"}
	}
	j.ackF, j.ackSeq = f, a.seq
	return a, true, nil
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
	encodeAck(b[:0], 1, m, m.Offset, nil)
	encodeAck(b[ackSlotSize:ackSlotSize], 2, m, m.Offset, nil)
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
	j.ackSeq, j.ackV1 = 2, false
	return nil
}

// putAck writes m, with the copy data of the segment's bytes [start,
// m.Offset), into the slot that does not hold the current mark, without
// syncing: the caller syncs the file (syncAck) and then counts the slot
// as current (j.ackSeq++). Until then a failure leaves the current mark
// readable, and writing again goes to the same slot. Called by the
// writer (or by Open before the writer starts).
func (j *Journal) putAck(m Mark, start int64, data []byte) error {
	seq := j.ackSeq + 1
	j.ackBuf = encodeAck(j.ackBuf[:0], seq, m, start, data)
	if _, err := j.ackF.WriteAt(j.ackBuf, int64(seq%2)*ackSlotSize); err != nil {
		return fmt.Errorf("journal: record the acknowledged mark: %w", err)
	}
	return nil
}

func (j *Journal) syncAck() error {
	if err := j.ackF.Sync(); err != nil {
		return fmt.Errorf("journal: record the acknowledged mark: %w", err)
	}
	return nil
}

// writeAck records m as the acknowledged mark, with no copy, and syncs it.
func (j *Journal) writeAck(m Mark) error {
	err := j.putAck(m, m.Offset, nil)
	if err == nil {
		err = j.syncAck()
	}
	if err == nil {
		j.ackSeq++
	}
	return err
}

// repairFromAck makes the bytes [a.start, a.mark.Offset) of s what the
// ack slot's copy says they are: the copy and the group were synced at
// the same time, and the group's Appends returned only once both were
// durable. A difference is either a group torn by a crash before it was
// acknowledged (restoring it is what a crash just after its sync would
// have left) or damage to an acknowledged group (restoring it repairs
// it); either way the copy is what the segment held, so nothing
// acknowledged is lost. A file that ends before a.start lost more than
// the copy holds: recovery reports that as corruption.
func (j *Journal) repairFromAck(s *segment, a ackSlot, rep *RecoveryReport) error {
	if len(a.copy) == 0 || a.mark.Segment != s.id || a.start < SegmentHeaderSize {
		return nil
	}
	size, err := s.f.Size()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if size < a.start {
		return nil
	}
	have := make([]byte, len(a.copy))
	n, _ := s.f.ReadAt(have, a.start)
	if n == len(have) && string(have) == string(a.copy) {
		return nil
	}
	if _, err := s.f.WriteAt(a.copy, a.start); err != nil {
		return fmt.Errorf("journal: restore %s from %s: %w", s.name, AckName, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("journal: restore %s from %s: %w", s.name, AckName, err)
	}
	rep.Restored, rep.RestoredFile, rep.RestoredOffset, rep.RestoredBytes = true, s.name, a.start, int64(len(a.copy))
	j.log.Warn("journal: the last group differed from its copy in the ack file (a crash tore it, or the disk damaged it); restored it",
		"file", s.name, "offset", a.start, "bytes", len(a.copy))
	return nil
}

// later is the later of two marks.
func later(a, b Mark) Mark {
	if a.Segment > b.Segment || a.Segment == b.Segment && a.Offset > b.Offset {
		return a
	}
	return b
}
