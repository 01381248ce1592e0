package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// ManifestName is the journal's manifest in its directory: the segments
// in order and the acknowledged mark (see doc.go, "Manifest").
const ManifestName = "journal.json"

const manifestTemp = ManifestName + ".tmp"

// Checkpoint defaults: the writer records the acknowledged mark once it
// has been idle this long, and at least this often while busy.
const (
	DefaultCheckpointIdle  = 20 * time.Millisecond
	DefaultCheckpointEvery = time.Second
)

// Mark is the acknowledged high-water mark: every frame that ends at or
// before Offset of Segment, and every frame of an earlier segment, was made
// durable and acknowledged. Damage there is corruption, never a torn tail.
type Mark struct {
	Segment uint64 `json:"segment"`
	Offset  int64  `json:"offset"`
}

func (m Mark) covers(seg uint64, off int64) bool {
	return seg < m.Segment || seg == m.Segment && off < m.Offset
}

type manifest struct {
	Format   int      `json:"format"`
	Segments []uint64 `json:"segments"`
	Acked    Mark     `json:"acked"`
}

// readManifest reads the manifest; ok is false when there is none.
func (j *Journal) readManifest() (m manifest, ok bool, err error) {
	name := join(j.dir, ManifestName)
	f, err := j.fs.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return m, false, fmt.Errorf("journal: %w", err)
	}
	if size > 64<<20 {
		return m, false, fmt.Errorf("journal: %s is %d bytes, not a manifest", name, size)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n < len(b) {
		return m, false, fmt.Errorf("journal: read %s: %w", name, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("journal: %s does not parse (%v): the list of segments is lost; refusing to start", name, err)
	}
	switch {
	case m.Format != FormatVersion:
		return m, false, fmt.Errorf("journal: %s is of format %d, this build reads %d", name, m.Format, FormatVersion)
	case len(m.Segments) == 0:
		return m, false, fmt.Errorf("journal: %s lists no segment", name)
	}
	for i, id := range m.Segments {
		if id == 0 || i > 0 && id != m.Segments[i-1]+1 {
			return m, false, fmt.Errorf("journal: %s lists segments %v, which are not consecutive", name, m.Segments)
		}
	}
	if last := m.Segments[len(m.Segments)-1]; m.Acked.Segment > last {
		return m, false, fmt.Errorf("journal: %s has its acknowledged mark in segment %d, after its last segment %d", name, m.Acked.Segment, last)
	}
	return m, true, nil
}

// writeManifest records the current segments and the acknowledged mark:
// written to a temporary file, synced, renamed over the manifest and the
// directory synced, so that the manifest is always one whole version. The
// mark is the head's durable end, which is always acknowledged data. The
// caller holds mfMu and not mu.
func (j *Journal) writeManifest() error {
	j.mu.Lock()
	m := manifest{Format: FormatVersion, Segments: make([]uint64, 0, len(j.segs))}
	for id := range j.segs {
		m.Segments = append(m.Segments, id)
	}
	m.Acked = Mark{j.head.id, j.head.size}
	j.mu.Unlock()
	slices.Sort(m.Segments)
	b, _ := json.Marshal(m)
	tmp := join(j.dir, manifestTemp)
	f, err := j.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("journal: write manifest: %w", err)
	}
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = j.fs.Rename(tmp, join(j.dir, ManifestName))
	}
	if err == nil {
		err = j.fs.SyncDir(j.dir)
	}
	if err != nil {
		return fmt.Errorf("journal: write manifest: %w", err)
	}
	j.mu.Lock()
	j.mark = m.Acked
	j.lastCheckpoint = time.Now()
	j.mu.Unlock()
	return nil
}

// checkpoint writes the manifest to move the acknowledged mark up to the
// durable end. A failure is logged, not fatal: the mark only lags.
func (j *Journal) checkpoint() {
	j.mfMu.Lock()
	defer j.mfMu.Unlock()
	if j.ckStopped || !j.stale() {
		return
	}
	if err := j.writeManifest(); err != nil {
		j.log.Warn("journal: checkpoint of the acknowledged mark failed", "err", err)
	}
}

// stale reports whether the durable end is past the recorded mark.
func (j *Journal) stale() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.staleLocked()
}

func (j *Journal) staleLocked() bool {
	return j.head != nil && (j.mark.Segment != j.head.id || j.mark.Offset != j.head.size)
}

// segmentVersion reads the format version of the segment file name, or 0
// when its header does not parse.
func (j *Journal) segmentVersion(name string) int {
	f, err := j.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	b := make([]byte, SegmentHeaderSize)
	if n, _ := f.ReadAt(b, 0); n < len(b) {
		return 0
	}
	_, v, err := parseSegmentHeader(b)
	if err != nil {
		return 0
	}
	return v
}

// listSegments decides which segments make up the journal, from the
// manifest and the directory. Without a manifest, a directory with no
// segment is a new journal (created is true) and one with format 2
// segments only is migrated; anything else is refused. With one, every
// listed segment must exist, a segment older than the first listed is a
// compaction's leftover (the manifest dropped it, the removal did not
// happen) and is removed, the one after the last listed is a rotation's
// leftover when it holds no more than a header, and any other file is
// refused.
func (j *Journal) listSegments(onDisk []uint64) (ids []uint64, mark Mark, created, migrated bool, err error) {
	m, ok, err := j.readManifest()
	if err != nil {
		return nil, mark, false, false, err
	}
	if !ok {
		if len(onDisk) == 0 {
			return nil, mark, true, false, nil
		}
		for i, id := range onDisk {
			name := join(j.dir, SegmentName(id))
			if v := j.segmentVersion(name); v != 2 && !(v == 0 && i == len(onDisk)-1) {
				return nil, mark, false, false, fmt.Errorf("journal: %s is missing but %s holds segment files (%s, ...): without the manifest the journal cannot tell whether segments were lost; refusing to start", join(j.dir, ManifestName), j.dir, SegmentName(onDisk[0]))
			}
			if i > 0 && id != onDisk[i-1]+1 {
				return nil, mark, false, false, fmt.Errorf("journal: segment file %s is missing (the segments before and after it exist); refusing to start", join(j.dir, SegmentName(onDisk[i-1]+1)))
			}
		}
		j.log.Warn("journal: migrating a format 2 journal (no manifest): its segments are taken as found", "dir", j.dir, "segments", len(onDisk))
		return onDisk, mark, false, true, nil
	}
	listed := map[uint64]bool{}
	for _, id := range m.Segments {
		listed[id] = true
	}
	present := map[uint64]bool{}
	first, last := m.Segments[0], m.Segments[len(m.Segments)-1]
	for _, id := range onDisk {
		present[id] = true
		if listed[id] {
			continue
		}
		name := join(j.dir, SegmentName(id))
		var size int64 = -1
		if f, err := j.fs.OpenFile(name, os.O_RDONLY, 0); err == nil {
			size, _ = f.Size()
			f.Close()
		}
		switch {
		case id < first:
			j.log.Warn("journal: removing a segment that compaction had dropped from the manifest", "file", name)
		case id == last+1 && size >= 0 && size <= SegmentHeaderSize:
			j.log.Warn("journal: removing a segment whose creation was cut short before the manifest listed it", "file", name, "bytes", size)
		default:
			return nil, mark, false, false, &CorruptError{File: name, Offset: 0, Reason: fmt.Sprintf("segment file not listed in %s (which lists %d to %d)", ManifestName, first, last)}
		}
		if err := j.fs.Remove(name); err != nil {
			return nil, mark, false, false, fmt.Errorf("journal: %w", err)
		}
	}
	var missing []string
	for _, id := range m.Segments {
		if !present[id] {
			missing = append(missing, join(j.dir, SegmentName(id)))
		}
	}
	if len(missing) > 0 {
		return nil, mark, false, false, fmt.Errorf("%w: segment file %s listed in %s is missing; refusing to start with acknowledged data gone", ErrCorrupt, strings.Join(missing, ", "), ManifestName)
	}
	return m.Segments, m.Acked, false, false, nil
}
