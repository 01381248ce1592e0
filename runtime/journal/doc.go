// Package journal is the host's write-ahead log: an append-only sequence of
// checksummed frames in segment files, made durable by group commit.
//
// # Why a hand-written journal
//
// The store needs exactly one thing from the disk: "this group of
// mutations is durable, in this order". An embedded database would give
// that plus a query engine, a page cache and a second on-disk format whose
// recovery rules the host cannot state. A journal is a few hundred lines
// whose every failure mode is tested here with FaultFS, and it lets the
// store keep message bodies where they were first written instead of
// copying them into a second structure.
//
// # Framing
//
// A segment is a file named %016d.wal. It starts with a segment header,
// itself shaped like a frame and checksummed with plain CRC32C:
//
//	[u32 16][u32 crc32c(body)][u32 crc32c(body)] body: ["TKQJ"][u32 FormatVersion][u64 salt]
//
// (FormatVersion 3; Open also reads segments of format 2, which had no
// manifest) and then holds frames back to back:
//
//	[u32 length][u32 crc32c(salt, offset, length)][u32 crc32c(payload)][payload]
//
// all little-endian. The salt is drawn from crypto/rand when the segment is
// created and never leaves the disk; the header CRC covers it, the
// frame's own offset in the segment and its length. The header has its own
// CRC so that a false start costs a 20-byte check: recovery scans byte by
// byte past a bad frame (below), and a CRC over the rest of the file at
// every position would make that scan quadratic on a large damaged tail. A
// payload is client data (a message body) and may hold bytes that look
// like a frame; without the salt they validate as a frame of the segment
// only by a blind 2^-32 guess, and even a verbatim copy of a real frame of
// the same segment fails anywhere but at its own offset. That is what lets
// recovery tell a torn tail from damage (below) without trusting payloads.
// The header is written and synced before any frame is written after it.
//
// One Append is one frame and one atomic unit: a frame is either wholly
// replayed or not at all. A length of zero is never written, so a
// zero-filled region (what some file systems leave after a crash that
// extended the file before its data reached the disk) never parses as
// frames. Frames never span segments; the head segment is sealed and a new
// one started when the next group would take it past Options.SegmentSize.
//
// # Group commit
//
// One writer goroutine takes every frame queued while the previous write
// and sync ran, writes them with one write and makes them durable with one
// fdatasync (at the same time as one of the acknowledged mark, below). The sync is
// the expensive part, so under load many frames
// share one. Writers that wait for their frame are all inside the group
// being synced, so when the sync returns the queue is nearly empty: taking
// just the first frame to come back would make groups alternate between a
// few frames and nearly all (about N/2 per sync with N writers). So the
// writer gathers first: it holds the next group back until as many frames
// are queued as the last group had, for at most the duration of the last
// sync (capped at 5 ms). The writers come back in microseconds, so with N
// concurrent writers nearly all N ride each sync; one that does not come
// back costs the others that window once. Writes and syncs still never
// overlap: a group is written only after the previous one is synced, which
// is what recovery relies on. Frames become durable in the order their Append calls queued
// them; each frame's onDurable callback runs on the writer in that order
// before any waiter of the group is released, which is how the store keeps
// its memory in the journal's order. If the write or the sync fails, every
// frame of the group fails with the cause, and the writer truncates the
// segment back to its last durable size and syncs, so that the file never
// holds a frame that was reported as failed (replay would otherwise revive
// it). If that truncate fails, the journal refuses all writes (ErrBroken)
// until it is reopened, since it can no longer say what the file holds.
// Nothing else is sticky: a full disk that gets space back just works.
//
// # Zeroing ahead
//
// A group that grows the file makes its fdatasync commit the new file size
// too, a metadata write on top of the data. With Options.ZeroAhead, a
// goroutine of its own keeps the head segment written with zeros (and
// synced) some megabytes past its data, so that groups are written into
// space the file already has and their syncs flush only data: 1.4 to 1.8
// times as fast on the disks measured here. It never writes where a group
// is being written, a segment is cut back to its data when it is sealed
// (so only the last segment can end in zeros), and if zeroing fails (a
// full disk) writes simply grow the file again.
//
// # Recovery
//
// Open replays every frame of every segment the manifest lists, in order.
// Because a group is synced before the next one is written, and a segment
// is sealed only after its last group was synced, a crash can only damage
// the tail of the last segment: the last group, which Open first restores
// from its copy in the ack file when the mark covers it (below), and what
// lies after the acknowledged mark, which was never acknowledged. So a bad frame
// (incomplete header, length out of range or past the end of the file,
// checksum mismatch) at the end of the last segment is cut off and
// reported in RecoveryReport. Zeros after the last frame of the last
// segment are not damage and are kept: they are the space zeroed ahead
// (below), or what a file system that grew the file before the data
// reached the disk leaves of a group never acknowledged. A bad frame
// anywhere else — in a sealed segment, before the acknowledged mark, or
// followed by a valid frame — is media damage or a bug; it may
// have been acknowledged, so Open fails with a *CorruptError naming the
// file and offset and the host does not start. "Valid frame" means valid
// with the segment's salt at its offset, so a message body in a torn tail
// that holds a well-formed frame (even a copy of one of the segment's own)
// does not pass for acknowledged data after the damage. A segment whose
// header is bad is damage too, unless it is the last one and holds nothing
// but that header: a crash tore its creation, and Open writes a new header
// (reported like a torn tail when there were bytes to drop).
//
// # Acknowledged mark
//
// The acknowledged mark is a (segment, offset) before which every frame
// was made durable and acknowledged. It advances with the acknowledgement
// it covers: before any of a group's Appends returns, journal.ack holds,
// durably, the group's end as the mark, so every frame whose Append
// returned is below the durable mark, and no damage to it — a bit flip in
// the last frame, the file cut short — can pass for a torn tail.
//
// The mark cannot simply be synced together with the group it covers: a
// crash could make the mark durable and not the group, and a plain power
// loss would then read as damage below the mark. Syncing it after the
// group costs a second fdatasync per group commit, one after the other,
// which halved the journal's throughput. So the ack file's slot holds,
// beside the mark, a copy of the group's bytes; the writer writes the
// group to the segment and the mark and the copy to the ack file, syncs
// both files at once (two concurrent fdatasyncs cost little more than
// one) and only then runs the group's onDurable callbacks and releases
// its Appends. On Open, when the segment's bytes of the last group
// differ from the copy — torn by a crash before the group was
// acknowledged, or damaged since — the copy is written back (one WARN,
// RecoveryReport.Restored): either way it is what the group held, so
// nothing acknowledged is lost and a crash never reads as damage.
// Damage before the last group, or a file that ends before it, is still
// corruption. A group larger than a slot's copy (64 KiB less a header)
// is synced first and its mark, without a copy, after it, as a second
// sync. A crash before the mark is durable leaves the group above the
// mark: never acknowledged, it may be cut like any torn tail.
//
// journal.ack is two slots of 64 KiB ("TKQA", version 2, sequence,
// segment, offset, the copy's start, CRC32C of the copy, CRC32C of the
// header, the copy), written in turn, so that a write torn by a crash
// leaves the other slot, the previous mark, intact; the valid slot with
// the higher sequence is the mark, and neither valid is corruption. If
// the mark cannot be written or synced, the group fails like a failed
// sync (the old mark, without a copy, is put back, then the group is
// cut off). The file never grows; it is created whole (temporary file,
// rename) when a journal without one is opened, and an ack file of
// format 1 (512-byte slots, no copy) is read and replaced so.
//
// # Manifest
//
// Format 3 keeps a manifest, journal.json, next to the segments: the list
// of segments in order and a copy of the acknowledged mark as of its last
// checkpoint (Open takes the later of the two). It is
// rewritten whole (temporary file, sync, rename, directory sync) when a
// segment is created (before the segment gets any frame), before a segment
// is removed, when the writer has been idle for CheckpointIdle (20 ms) with
// the mark behind the durable end, at most once per CheckpointEvery (1 s)
// while it is busy, and on Close. Checkpoints run in a goroutine of their
// own: they cost nothing per group commit and never hold one up.
//
// Open trusts the manifest, not the directory listing: a listed segment
// that is missing (deleted in the middle, the last one, all of them) fails
// Open naming the file, whatever host.json says; an unlisted segment is
// refused too, except the leftovers of the two crashes the ordering above
// allows (a file older than the first listed: a removal that the manifest
// recorded but that did not happen; the segment after the last listed
// holding at most a header: a creation cut short), which are removed. A
// segment directory without a manifest is refused, unless it holds only
// format 2 segments, which are migrated (listed as found, consecutive IDs
// required). The mark turns damage into corruption: a bad frame before it,
// or a file that ends before it, fails Open with a *CorruptError naming the
// file and offset, even in the last segment; only what lies after the
// mark can be a torn tail to cut. So a bit flip in the last frame of an
// acknowledged Append is reported, not silently dropped.
//
// # Disk reserve
//
// Options.Reserve keeps disk space free (at most an eighth of the file
// system, at least MinReserve, for an FS that is a SpaceFS): Append
// refuses with ErrNoSpace when a frame would take the free space below
// it, AppendReserved may use half of it (what fits in the zeros already
// ahead of the head takes none) and AppendReclaim all of it. The
// store appends settlements and deletes reserved and compaction's
// rewrites as reclaim, so a disk filled by new messages can always be
// emptied again, and Rotate seals a mostly dead head segment so that
// compaction can reclaim it. The reserve covers every write that hands
// space back, on any file system Open accepts: zeros ahead are written
// only while they leave the reserve free; a segment is at most a quarter
// of the reserve, so compaction can rewrite one segment's live records
// into the half that settlements leave and still write the manifest that
// drops it; and Open refuses (ErrDiskTooSmall) a file system smaller than
// eight times MinReserve. The look at the free space is refreshed after
// every group commit and removal; a look begun earlier never overwrites
// a later one.
//
// # Compaction support
//
// The journal does not know what is live; the store does. The journal
// lists segments with their sizes, tells which segment a Pos is in, and
// removes whole segments — only the oldest, because a record in a later
// segment can cancel an earlier one (a delete after a put), and removing a
// later segment first could bring the cancelled record back on replay.
//
// FS abstracts the file system: OSFS is the real one (fdatasync via
// golang.org/x/sys/unix), MemFS models what survives a power loss, and
// FaultFS injects failing syncs, short writes, a full disk, failing
// truncates, bit flips and torn crashes, deterministically from a seed.
package journal
