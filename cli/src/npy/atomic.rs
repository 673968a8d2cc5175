//! Replacing a file atomically: a new temporary file beside it, synced, then renamed over it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{io_error, KindResult};

pub(super) fn write_atomic(path: &Path, parts: &[&[u8]]) -> KindResult<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp, mut file) = create_temp(dir)?;
    let result = (|| {
        for part in parts {
            file.write_all(part).map_err(io_error("write"))?;
        }
        file.sync_all().map_err(io_error("sync"))?;
        drop(file);
        fs::rename(&tmp, path).map_err(io_error("replace the file"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir(dir);
    Ok(())
}

/// Creates a new, uniquely named file in `dir`.
fn create_temp(dir: &Path) -> KindResult<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut attempt = 0;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".scatterjit-{}-{n}.npy.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => return Err(io_error("create a temporary file next to it")(e)),
        }
    }
}

/// Makes the rename durable where the platform allows it. The rename has happened already,
/// so a failure here is not reported.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}
