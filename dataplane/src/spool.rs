//! The durable usage spool and its sink: no usage record is ever lost.
//!
//! Writing: each serving thread appends records (one JSON line, one `write`) to its own segment
//! file, so there is no lock; the write happens before the caller sees the end of the answer,
//! and a `kill -9` cannot lose it (the page cache survives the process). Segments rotate every
//! `SEGMENT_AGE` (or at `SEGMENT_BYTES`).
//!
//! Draining (`drain`, one task): every 100 ms, read each segment's new complete lines, append the
//! ones whose `request_id` the sink has not seen and fsync the sink (so every record is durable
//! within about 100 ms), then fsync and delete segments that are closed (a newer one exists, or
//! they belong to an earlier process) and fully delivered. The active segment is never fsynced,
//! so a writer never waits on the writeback of its own file. (Under sustained load metering still
//! adds a p99 tail: see `docs/BENCHMARKS.md`; it is open work.) A crash between delivering and deleting
//! re-delivers on restart; the sink's request-id check makes that idempotent.

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
    let mut line = match serde_json::to_vec(rec) {
        Ok(l) => l,
        Err(_) => return,
    };
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

/// The standalone sink: a JSONL file, deduplicated by request id.
pub struct JsonlSink {
    file: File,
    seen: HashSet<String>,
}

impl JsonlSink {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut seen = HashSet::new();
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                if let Some(id) = request_id(line.as_bytes()) {
                    seen.insert(id);
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file, seen })
    }

    /// Appends the records not delivered before and makes them durable; the acknowledgement.
    fn deliver(&mut self, lines: &[&[u8]]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut fresh = Vec::new();
        for l in lines {
            match request_id(l) {
                Some(id) if self.seen.contains(&id) => {}
                Some(id) => {
                    buf.extend_from_slice(l);
                    buf.push(b'\n');
                    fresh.push(id);
                }
                None => tracing::error!(line = %String::from_utf8_lossy(l), "unreadable usage record in the spool"),
            }
        }
        if buf.is_empty() {
            return Ok(());
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.seen.extend(fresh);
        Ok(())
    }
}

fn request_id(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        request_id: String,
    }
    serde_json::from_slice::<Id>(line).ok().map(|i| i.request_id)
}

/// Runs until the process ends: spool → sink every 100 ms.
pub async fn drain(dir: PathBuf, mut sink: JsonlSink) {
    let mut offsets: HashMap<PathBuf, u64> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = drain_once(&dir, &mut sink, &mut offsets) {
            tracing::error!(error = %e, "usage spool drain failed; retrying");
        }
    }
}

/// One pass over the spool; public for tests and for a final drain at shutdown.
pub fn drain_once(dir: &Path, sink: &mut JsonlSink, offsets: &mut HashMap<PathBuf, u64>) -> std::io::Result<()> {
    let own = TARGET.get().map(|t| t.prefix.clone());
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    segments.sort();
    for (i, path) in segments.iter().enumerate() {
        let mut f = File::open(path)?;
        let start = offsets.get(path).copied().unwrap_or(0);
        f.seek(SeekFrom::Start(start))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        // Only complete lines; a partial last line is read again next time.
        let complete = buf.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        let lines: Vec<&[u8]> = buf[..complete].split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
        sink.deliver(&lines)?;
        let end = start + complete as u64;
        offsets.insert(path.clone(), end);
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let from_this_process = own.as_deref().is_some_and(|p| name.starts_with(p));
        let thread_part = name.rsplit_once('-').map(|(a, _)| a).unwrap_or_default();
        let superseded = segments[i + 1..].iter().any(|n| {
            n.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('-'))
                .is_some_and(|(a, _)| a == thread_part)
        });
        let closed = !from_this_process || superseded;
        if closed {
            // Durable before it goes: no writer touches a closed segment, so this fsync blocks
            // nobody. (Records of the active segment are already in the fsynced sink.)
            f.sync_data()?;
            if end == std::fs::metadata(path)?.len() {
                std::fs::remove_file(path)?;
                offsets.remove(path);
            }
        }
    }
    Ok(())
}
