//! The durable usage spool and its sink: no usage record is ever lost.
//!
//! Writing: each serving thread appends records (one JSON line, one `write`) to its own segment
//! file, so there is no lock; the write happens before the caller sees the end of the answer,
//! and a `kill -9` cannot lose it (the page cache survives the process). Segments rotate every
//! `SEGMENT_AGE` (or at `SEGMENT_BYTES`).
//!
//! Draining (`spawn_drain`, one thread at `SCHED_IDLE`): every 100 ms, read each segment's new
//! complete lines in chunks of at most `CHUNK` bytes, hand them to the sink, and commit the sink
//! (fsync: every record is durable within about 100 ms); then delete the segments that are closed
//! (a newer one exists, or they belong to an earlier process) and fully delivered. Nothing on this
//! path fsyncs a segment, so a writer never waits on writeback, and the drain's work comes in
//! short slices that a serving thread preempts (measured in `docs/BENCHMARKS.md`).
//!
//! Within one process every record is delivered once (the drain tracks each segment's delivered
//! offset). A crash between committing and deleting re-delivers the leftover segments on restart;
//! sinks are idempotent by request id, so that cannot duplicate a record.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use ax_protocol::usage::UsageRecord;

const SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
/// A segment is closed after this long, so the drain's fsync (which makes concurrent writers to
/// the same file wait on page writeback) only ever touches files nobody writes any more.
const SEGMENT_AGE: Duration = Duration::from_millis(100);

/// Where this process spools: the directory and this process's segment-name prefix.
struct Target {
    dir: PathBuf,
    prefix: String,
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Turns the spool on for this process (at start, before serving).
pub fn init(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let prefix = format!("spool-{started:024}-{}", std::process::id());
    let _ = TARGET.set(Target { dir: dir.to_path_buf(), prefix });
    Ok(())
}

struct Writer {
    file: File,
    written: u64,
    seq: u32,
    opened: std::time::Instant,
}

thread_local! {
    static WRITER: RefCell<Option<Writer>> = const { RefCell::new(None) };
}

fn segment_path(t: &Target, thread: usize, seq: u32) -> PathBuf {
    t.dir.join(format!("{}-t{thread:03}-{seq:06}.jsonl", t.prefix))
}

/// Appends one record. Without a spool (tests, or no `metering.spool_dir`) the record goes to
/// the log only; if the spool cannot be written, it is logged in full so it is still not lost.
pub fn append(rec: &UsageRecord) {
    let Some(t) = TARGET.get() else { return };
    let mut line = Vec::with_capacity(1024);
    super::record_json::write(&mut line, rec);
    line.push(b'\n');
    let thread = crate::worker::current();
    let result = WRITER.with(|w| -> std::io::Result<()> {
        let mut w = w.borrow_mut();
        if w.as_ref().is_none_or(|w| w.written >= SEGMENT_BYTES || w.opened.elapsed() >= SEGMENT_AGE) {
            let seq = w.as_ref().map_or(0, |w| w.seq + 1);
            let file = OpenOptions::new().create(true).append(true).open(segment_path(t, thread, seq))?;
            *w = Some(Writer { file, written: 0, seq, opened: std::time::Instant::now() });
        }
        let Some(w) = w.as_mut() else { return Ok(()) };
        w.file.write_all(&line)?;
        w.written += line.len() as u64;
        Ok(())
    });
    if let Err(e) = result {
        tracing::error!(error = %e, record = %String::from_utf8_lossy(&line), "usage spool write failed; record kept in this log line");
    }
}

/// Where delivered records go. Delivery must be idempotent by request id.
pub trait Sink: Send {
    /// Takes complete record lines (without their newline).
    fn deliver(&mut self, lines: &[&[u8]]) -> std::io::Result<()>;
    /// Makes everything delivered so far durable: the acknowledgement. Only after it returns may
    /// the spool delete what was delivered.
    fn commit(&mut self) -> std::io::Result<()>;
    /// Forgets what was delivered since the last commit (the pass failed; it will be offered again).
    fn abort(&mut self);
}

/// The standalone sink: a JSONL file, deduplicated by request id.
///
/// Duplicates can only come from segments that outlived a crash, and those were delivered (if at
/// all) in the previous process's last moments, so the dedupe set holds the request ids in the
/// file's last `DEDUPE_TAIL` bytes, read once at open: bounded memory and start time however large
/// the file grows. Records delivered by this process are never offered twice, so nothing is added.
pub struct JsonlSink {
    file: File,
    seen: HashSet<String>,
    buf: Vec<u8>,
    /// The file's length at the last commit: an aborted pass is cut back to it.
    committed: u64,
    /// Lines that are not a usage record go to `<stem>.dead.jsonl` beside the sink, with the
    /// reason, and are counted: one bad line never stops the records after it.
    dead: DeadLetters,
}

/// The standalone sink's dead-letter file: one JSON line per refused line (`reason`, the line as
/// lossy UTF-8, `at_ms`), committed with the sink.
struct DeadLetters {
    path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
}

impl DeadLetters {
    fn add(&mut self, line: &[u8], reason: &str) {
        metrics::counter!("ax_usage_dead_letters_total", "sink" => "jsonl").increment(1);
        tracing::error!(reason, line = %String::from_utf8_lossy(line), "usage record dead-lettered");
        let at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let entry =
            serde_json::json!({ "at_ms": at_ms as u64, "reason": reason, "line": String::from_utf8_lossy(line) });
        if serde_json::to_writer(&mut self.buf, &entry).is_ok() {
            self.buf.push(b'\n');
        }
    }

    fn commit(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(OpenOptions::new().create(true).append(true).open(&self.path)?),
        };
        file.write_all(&self.buf)?;
        file.sync_data()?;
        self.buf.clear();
        Ok(())
    }
}

/// Whether a spooled line is a usage record a sink can take: a JSON object with a non-empty
/// `request_id`. The reason when it is not.
pub fn check_line(line: &[u8]) -> Result<(), &'static str> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        request_id: std::borrow::Cow<'a, str>,
    }
    let Ok(text) = std::str::from_utf8(line) else { return Err("not UTF-8") };
    match serde_json::from_str::<Head<'_>>(text) {
        Ok(h) if !h.request_id.is_empty() => Ok(()),
        Ok(_) => Err("empty request_id"),
        Err(_) => Err("not a usage record (JSON object with a request_id)"),
    }
}

/// How much of an existing sink file is indexed for deduplication (about 100,000 records).
const DEDUPE_TAIL: u64 = 64 * 1024 * 1024;

impl JsonlSink {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(path)?;
        let len = file.metadata()?.len();
        let start = len.saturating_sub(DEDUPE_TAIL);
        file.seek(SeekFrom::Start(start))?;
        let mut tail = Vec::new();
        Read::by_ref(&mut file).take(DEDUPE_TAIL).read_to_end(&mut tail)?;
        // Starting mid-file, the first (partial) line is not a record.
        let from = if start == 0 { 0 } else { memchr::memchr(b'\n', &tail).map_or(tail.len(), |p| p + 1) };
        let seen = lines(&tail[from..]).filter_map(request_id).collect();
        let stem = path.file_stem().map_or_else(|| "usage".into(), |s| s.to_string_lossy().into_owned());
        let dead = DeadLetters { path: path.with_file_name(format!("{stem}.dead.jsonl")), file: None, buf: Vec::new() };
        Ok(Self { file, seen, buf: Vec::new(), committed: len, dead })
    }
}

impl Sink for JsonlSink {
    fn deliver(&mut self, lines: &[&[u8]]) -> std::io::Result<()> {
        for l in lines {
            if let Err(reason) = check_line(l) {
                self.dead.add(l, reason);
                continue;
            }
            if !self.seen.is_empty() && request_id(l).is_some_and(|id| self.seen.contains(&id)) {
                continue;
            }
            self.buf.extend_from_slice(l);
            self.buf.push(b'\n');
        }
        // Bounded writes: a long copy in the kernel is a stretch nobody can preempt.
        if self.buf.len() >= CHUNK {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn commit(&mut self) -> std::io::Result<()> {
        // Dead letters first: a pass that fails after them is offered again and may repeat a dead
        // letter, never a record.
        self.dead.commit()?;
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        self.file.sync_data()?;
        self.committed = self.file.metadata()?.len();
        Ok(())
    }

    fn abort(&mut self) {
        self.buf.clear();
        self.dead.buf.clear();
        if let Err(e) = self.file.set_len(self.committed) {
            tracing::error!(error = %e, "cannot cut the usage sink back after a failed pass");
        }
    }
}

/// The non-empty lines of `buf` (split at `\n`).
fn lines(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = buf;
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        if !line.is_empty() {
            return Some(line);
        }
    })
}

/// The record's request id. Records are written with `request_id` first, so this is a prefix
/// match in the common case; anything else, such as an id with escapes, takes the full parse.
fn request_id(line: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = br#"{"request_id":""#;
    if let Some(rest) = line.strip_prefix(PREFIX) {
        if let Some(end) = memchr::memchr2(b'"', b'\\', rest) {
            if rest[end] == b'"' {
                return std::str::from_utf8(&rest[..end]).ok().map(str::to_owned);
            }
        }
    }
    #[derive(serde::Deserialize)]
    struct Id {
        request_id: String,
    }
    serde_json::from_slice::<Id>(line).ok().map(|i| i.request_id)
}

/// The most the drain reads or writes in one system call.
const CHUNK: usize = 256 * 1024;

/// Starts the drain on its own thread: spool → sink every 100 ms, until the process ends.
///
/// The thread runs at `SCHED_IDLE`, so a serving thread that wakes up preempts it at once, and
/// every system call it makes moves at most `CHUNK` bytes, so the kernel never holds it long
/// (measured: at normal priority and unbounded reads, the drain's 3 ms bursts put a 1-2 ms p99 tail
/// on requests). `SCHED_IDLE` still gets a small share of a saturated CPU; a spool that falls
/// behind keeps every record (on disk, in the page cache) and catches up when load drops.
pub fn spawn_drain(dir: PathBuf, mut sink: Box<dyn Sink>) -> std::io::Result<std::thread::JoinHandle<()>> {
    const TICK: Duration = Duration::from_millis(100);
    std::thread::Builder::new().name("ax-spool".to_owned()).spawn(move || {
        set_idle_priority();
        let mut progress = Progress::default();
        let mut next = std::time::Instant::now() + TICK;
        loop {
            std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
            // A panic in a sink must not end metering for the rest of the process: the pass is
            // dropped (nothing advanced) and tried again next tick.
            let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                drain_once(&dir, sink.as_mut(), &mut progress)
            }));
            match pass {
                Ok(Ok(())) => {
                    // Alert on `time() - ax_spool_last_commit_timestamp_seconds`: a drain that
                    // stopped delivering shows here before a disk fills.
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    metrics::gauge!("ax_spool_last_commit_timestamp_seconds").set(now.as_secs_f64());
                }
                Ok(Err(e)) => {
                    metrics::counter!("ax_spool_drain_failures_total").increment(1);
                    tracing::error!(error = %e, "usage spool drain failed; retrying");
                }
                Err(_) => {
                    metrics::counter!("ax_spool_drain_failures_total").increment(1);
                    sink.abort();
                    tracing::error!("usage spool drain panicked; retrying next tick");
                }
            }
            next = (next + TICK).max(std::time::Instant::now());
        }
    })
}

/// Switches the calling thread to `SCHED_IDLE`. (One way: an unprivileged thread may not leave it.)
fn set_idle_priority() {
    use thread_priority::{NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy};
    let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    let tid = thread_priority::thread_native_id();
    if let Err(e) = thread_priority::set_thread_priority_and_policy(tid, ThreadPriority::Min, policy) {
        tracing::warn!(error = ?e, "cannot lower the spool drain's priority; it runs at normal priority");
    }
}

/// What the drain knows of the spool between passes.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Bytes of each segment delivered and acknowledged.
    offsets: HashMap<PathBuf, u64>,
    /// Closed segments that ended in a partial line, and their length when it was seen: a tail
    /// still there, unchanged, at the next pass can never be completed (its writer is gone, or a
    /// write was cut short) and is delivered as it is, for the sink to dead-letter.
    torn: HashMap<PathBuf, u64>,
}

/// One pass over the spool; public for tests and for a final drain at shutdown. Offsets advance
/// and segments go only once the sink committed; a failed pass is offered again next time.
pub fn drain_once(dir: &Path, sink: &mut dyn Sink, progress: &mut Progress) -> std::io::Result<()> {
    let mut advanced = progress.clone();
    match pass(dir, sink, &mut advanced) {
        Ok(done) => {
            *progress = advanced;
            // Delivered and acknowledged: the segment's records are durable in the sink.
            for path in done {
                std::fs::remove_file(&path)?;
                progress.offsets.remove(&path);
                progress.torn.remove(&path);
            }
            Ok(())
        }
        Err(e) => {
            sink.abort();
            Err(e)
        }
    }
}

/// Delivers and commits; returns the closed, fully delivered segments.
fn pass(dir: &Path, sink: &mut dyn Sink, progress: &mut Progress) -> std::io::Result<Vec<PathBuf>> {
    let Progress { offsets, torn } = progress;
    let own = TARGET.get().map(|t| t.prefix.clone());
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    segments.sort();
    let mut done = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    for (i, path) in segments.iter().enumerate() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let from_this_process = own.as_deref().is_some_and(|p| name.starts_with(p));
        let thread_part = name.rsplit_once('-').map(|(a, _)| a).unwrap_or_default();
        let superseded = segments[i + 1..].iter().any(|n| {
            n.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('-'))
                .is_some_and(|(a, _)| a == thread_part)
        });
        // Closed: no writer will append again, so reading to its end delivers all of it.
        let closed = !from_this_process || superseded;
        let mut f = File::open(path)?;
        let mut at = offsets.get(path).copied().unwrap_or(0);
        f.seek(SeekFrom::Start(at))?;
        let mut filled = 0;
        loop {
            let n = f.read(&mut buf[filled..])?;
            filled += n;
            // Only complete lines; a partial last line is read again with the next chunk.
            let complete = memchr::memrchr(b'\n', &buf[..filled]).map_or(0, |p| p + 1);
            if complete == 0 && filled == buf.len() {
                // A line longer than a chunk: grow rather than stall.
                buf.resize(buf.len() * 2, 0);
                continue;
            }
            let batch: Vec<&[u8]> = lines(&buf[..complete]).collect();
            sink.deliver(&batch)?;
            at += complete as u64;
            buf.copy_within(complete..filled, 0);
            filled -= complete;
            if n == 0 {
                break;
            }
        }
        let len = f.metadata()?.len();
        if closed && filled > 0 {
            // A partial last line in a closed segment: delivered as it is once it has stayed
            // unchanged for a whole pass (the sink dead-letters it); the segment can then go.
            if torn.get(path) == Some(&len) {
                sink.deliver(&[&buf[..filled]])?;
                at += filled as u64;
            } else {
                torn.insert(path.clone(), len);
            }
        }
        offsets.insert(path.clone(), at);
        if closed && at == len {
            done.push(path.clone());
        }
    }
    sink.commit()?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that remembers what it was given and what was committed.
    #[derive(Default)]
    struct Recorder {
        pending: Vec<String>,
        committed: Vec<String>,
        fail: bool,
    }

    impl Sink for Recorder {
        fn deliver(&mut self, lines: &[&[u8]]) -> std::io::Result<()> {
            self.pending.extend(lines.iter().map(|l| String::from_utf8_lossy(l).into_owned()));
            Ok(())
        }
        fn commit(&mut self) -> std::io::Result<()> {
            if self.fail {
                return Err(std::io::Error::other("sink down"));
            }
            self.committed.append(&mut self.pending);
            Ok(())
        }
        fn abort(&mut self) {
            self.pending.clear();
        }
    }

    fn record(id: &str, pad: usize) -> String {
        format!(r#"{{"request_id":"{id}","pad":"{}"}}"#, "x".repeat(pad))
    }

    #[test]
    fn request_id_takes_the_prefix_path_and_falls_back_to_a_parse() {
        assert_eq!(request_id(br#"{"request_id":"req-1","x":1}"#).as_deref(), Some("req-1"));
        assert_eq!(request_id(br#"{"request_id":"a\"b","x":1}"#).as_deref(), Some("a\"b"));
        assert_eq!(request_id(br#"{"x":1,"request_id":"late"}"#).as_deref(), Some("late"));
        assert_eq!(request_id(b"not json"), None);
    }

    #[test]
    fn drain_delivers_every_complete_line_once_across_chunks_and_deletes_closed_segments() {
        let dir = tempdir("chunks");
        // A segment of an earlier process (closed): many records spanning several chunks, one
        // longer than a chunk, and a partial last line that must wait.
        let mut text = String::new();
        let mut want = Vec::new();
        for i in 0..3000 {
            let r = record(&format!("r{i}"), if i == 1500 { CHUNK + 10 } else { 200 });
            text.push_str(&r);
            text.push('\n');
            want.push(r);
        }
        let old = dir.join("spool-0-1-t000-000000.jsonl");
        std::fs::write(&old, format!("{text}{{\"request_id\":\"partial")).unwrap();
        let mut sink = Recorder { fail: true, ..Recorder::default() };
        let mut progress = Progress::default();
        // A sink that cannot acknowledge: nothing advances, nothing is deleted.
        assert!(drain_once(&dir, &mut sink, &mut progress).is_err());
        assert!(sink.committed.is_empty() && progress.offsets.is_empty() && old.exists());
        sink.fail = false;
        drain_once(&dir, &mut sink, &mut progress).unwrap();
        assert_eq!(sink.committed, want);
        // The partial line keeps the segment (a closed segment goes only once fully delivered).
        assert!(old.exists());
        std::fs::OpenOptions::new().append(true).open(&old).unwrap().write_all(b"-done\"}\n").unwrap();
        drain_once(&dir, &mut sink, &mut progress).unwrap();
        assert_eq!(sink.committed.len(), 3001);
        assert_eq!(sink.committed[3000], r#"{"request_id":"partial-done"}"#);
        assert!(!old.exists());
        drain_once(&dir, &mut sink, &mut progress).unwrap();
        assert_eq!(sink.committed.len(), 3001, "nothing is delivered twice");
    }

    /// A closed segment whose last line was cut short (a write that failed half-way) is not kept
    /// forever: once the tail has stayed the same for a pass it is delivered as it is, and the
    /// segment goes.
    #[test]
    fn a_torn_last_line_is_delivered_after_a_pass_and_the_segment_goes() {
        let dir = tempdir("torn");
        let old = dir.join("spool-0-1-t000-000000.jsonl");
        std::fs::write(&old, format!("{}\n{{\"request_id\":\"cut", record("a", 5))).unwrap();
        let mut sink = Recorder::default();
        let mut progress = Progress::default();
        drain_once(&dir, &mut sink, &mut progress).unwrap();
        assert_eq!(sink.committed.len(), 1);
        assert!(old.exists(), "the tail may still be completed");
        drain_once(&dir, &mut sink, &mut progress).unwrap();
        assert_eq!(sink.committed, [record("a", 5), r#"{"request_id":"cut"#.to_owned()]);
        assert!(!old.exists());
    }

    /// A line that is not a usage record goes to the dead-letter file with its reason; the
    /// records around it are stored.
    #[test]
    fn jsonl_sink_dead_letters_what_is_not_a_record_and_keeps_the_rest() {
        let dir = tempdir("dead");
        let path = dir.join("usage.jsonl");
        let mut sink = JsonlSink::open(&path).unwrap();
        let (a, b) = (record("a", 3), record("b", 3));
        sink.deliver(&[a.as_bytes(), br#"{"request_id":"cut"#, b"\xff\xfe", br#"{"x":1}"#, b.as_bytes()]).unwrap();
        sink.commit().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{a}\n{b}\n"));
        let dead = std::fs::read_to_string(dir.join("usage.dead.jsonl")).unwrap();
        let reasons: Vec<String> = dead
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["reason"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(reasons.len(), 3, "{dead}");
        assert!(reasons[1].contains("UTF-8"), "{reasons:?}");
    }

    #[test]
    fn jsonl_sink_skips_ids_already_in_its_tail_and_commits_to_disk() {
        let dir = tempdir("sink");
        let path = dir.join("usage.jsonl");
        std::fs::write(&path, format!("{}\n{}\n", record("a", 10), record("b", 10))).unwrap();
        let mut sink = JsonlSink::open(&path).unwrap();
        let (a, c) = (record("a", 10), record("c", 10));
        sink.deliver(&[a.as_bytes(), c.as_bytes()]).unwrap();
        sink.commit().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let ids: Vec<_> = lines(text.as_bytes()).filter_map(request_id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ax-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
