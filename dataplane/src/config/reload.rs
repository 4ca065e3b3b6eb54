//! Standalone reload: rebuild the snapshot on SIGHUP and when the config file changes.
//!
//! The file is polled once a second (modification time and length, then content) rather than
//! watched with inotify: polling also sees editors that replace the file and Kubernetes
//! ConfigMaps that swap a symlink, which inotify watches on the old inode miss. An invalid file is
//! logged with its field path and the previous snapshot keeps serving.
//!
//! A file rewritten in place (truncated, then written) can be read halfway. A file that changed
//! while it was read is read again on the next tick, and an empty one never replaces a
//! configuration that serves ([`Snapshot::replacing`](crate::config::snapshot::Snapshot::replacing)):
//! read between truncation and write, it would refuse every caller until the next reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::snapshot::{ConfigError, SnapshotStore};

#[derive(PartialEq, Eq, Clone, Copy)]
struct Stamp(Option<SystemTime>, u64);

fn stamp(path: &std::path::Path) -> Stamp {
    match std::fs::metadata(path) {
        Ok(m) => Stamp(m.modified().ok(), m.len()),
        Err(_) => Stamp(None, 0),
    }
}

/// Tries one reload from the file's `text` (`None`: it could not be read); returns whether a new
/// snapshot was swapped in.
pub fn reload_now(store: &SnapshotStore, path: &std::path::Path, text: Option<&[u8]>) -> bool {
    let current = store.load();
    let loaded = match text.map(std::str::from_utf8) {
        Some(Ok(text)) => crate::config::from_text(text, current.version + 1, Some(&current)),
        Some(Err(e)) => Err(ConfigError { path: "(root)".into(), message: format!("not UTF-8: {e}") }),
        None => Err(ConfigError { path: path.display().to_string(), message: "cannot read".into() }),
    };
    match loaded.and_then(|(_, snap)| snap.replacing(&current)) {
        Ok(snap) => {
            let v = snap.version;
            store.swap(snap);
            tracing::info!(version = v, path = %path.display(), "configuration reloaded");
            true
        }
        Err(e) => {
            tracing::error!(error = %e, path = %path.display(), "configuration rejected; the previous one keeps serving");
            false
        }
    }
}

/// Runs until the process ends.
pub async fn watch<A: AsRef<SnapshotStore>>(app: Arc<A>, path: PathBuf) {
    let mut last = stamp(&path);
    let mut last_text = std::fs::read(&path).ok();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    #[cfg(unix)]
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reloading on file change only");
            None
        }
    };
    loop {
        #[cfg(unix)]
        let forced = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        #[cfg(not(unix))]
        let forced = {
            tick.tick().await;
            false
        };
        let now = stamp(&path);
        if !forced && now == last {
            continue;
        }
        let text = std::fs::read(&path).ok();
        if !forced && stamp(&path) != now {
            // Written to while it was read: the next tick reads it whole.
            continue;
        }
        last = now;
        if !forced && text == last_text {
            continue;
        }
        last_text = text;
        if forced {
            tracing::info!("SIGHUP: reloading configuration");
        }
        // The text read above: the one checked not to have changed while it was read.
        reload_now((*app).as_ref(), &path, last_text.as_deref());
    }
}
