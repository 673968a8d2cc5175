//! Replacing a file atomically: the bytes go to a new temporary file beside it, which is
//! synced and then renamed over it. Readers see the old file or the new one, never a part.
//!
//! The temporary file is created with `create_new`, so nothing already at its name (a file,
//! or a symbolic link planted there) is followed or overwritten; another name is tried. On
//! any error it is removed and the target is left as it was. The new file gets default
//! permissions, and a symbolic link at the target path is replaced by a regular file (the
//! link's target is left alone).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a file could not be replaced: the step that failed and the system's error.
#[derive(Debug)]
pub struct WriteError {
    /// What was being done (`"write"`, `"sync"`, `"replace the file"`, ...).
    pub action: &'static str,
    /// The system's error.
    pub error: io::Error,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot {}: {}", self.action, system_message(&self.error))
    }
}

impl std::error::Error for WriteError {}

/// The system's error text in the tool's one-line, lowercase style.
pub(crate) fn system_message(error: &io::Error) -> String {
    let text = error.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn failed(action: &'static str) -> impl FnOnce(io::Error) -> WriteError {
    move |error| WriteError { action, error }
}

/// Replaces `path` with the concatenation of `parts`, atomically (see the module's docs).
///
/// ```
/// let path = std::env::temp_dir().join(format!("atomic-doc-{}.txt", std::process::id()));
/// scatterjit_cli::atomic::write(&path, &[b"hello, ", b"world"]).unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"hello, world");
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn write(path: impl AsRef<Path>, parts: &[&[u8]]) -> Result<(), WriteError> {
    let path = path.as_ref();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp, mut file) = create_temp(dir)?;
    let result = (|| {
        for part in parts {
            file.write_all(part).map_err(failed("write"))?;
        }
        file.sync_all().map_err(failed("sync"))?;
        drop(file);
        fs::rename(&tmp, path).map_err(failed("replace the file"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir(dir);
    Ok(())
}

/// The temporary file's name for attempt `n` of this process.
fn temp_name(n: u64) -> String {
    format!(".scatterjit-{}-{n}.tmp", std::process::id())
}

/// The number of the next temporary name this process tries.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a new, uniquely named file in `dir`.
fn create_temp(dir: &Path) -> Result<(PathBuf, File), WriteError> {
    let mut attempt = 0;
    loop {
        let tmp = dir.join(temp_name(COUNTER.fetch_add(1, Ordering::Relaxed)));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => return Err(failed("create a temporary file next to it")(e)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy::test_support::TempDir;

    #[test]
    fn replaces_the_target_and_leaves_nothing_else() {
        let dir = TempDir::new("atomic-replace");
        let path = dir.path("out.bin");
        fs::write(&path, b"old contents").unwrap();
        write(&path, &[b"new ", b"", b"contents"]).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new contents");
        assert_eq!(dir.entries(), ["out.bin"]);
    }

    #[test]
    fn a_file_at_a_temporary_name_is_kept() {
        let dir = TempDir::new("atomic-taken");
        // Other tests may take names meanwhile; these are the next few this one can meet.
        let next = COUNTER.load(Ordering::Relaxed);
        let taken: Vec<String> = (next..next + 3).map(temp_name).collect();
        for name in &taken {
            fs::write(dir.path(name), b"someone else's").unwrap();
        }
        write(dir.path("out.bin"), &[b"data"]).unwrap();
        for name in &taken {
            assert_eq!(fs::read(dir.path(name)).unwrap(), b"someone else's");
        }
        assert_eq!(fs::read(dir.path("out.bin")).unwrap(), b"data");
        assert_eq!(dir.entries().len(), taken.len() + 1, "{:?}", dir.entries());
    }

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_target_is_replaced_not_followed() {
        let dir = TempDir::new("atomic-link");
        let elsewhere = dir.path("elsewhere");
        fs::write(&elsewhere, b"left alone").unwrap();
        let path = dir.path("out.bin");
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        write(&path, &[b"data"]).unwrap();
        assert!(fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(fs::read(&path).unwrap(), b"data");
        assert_eq!(fs::read(&elsewhere).unwrap(), b"left alone");
    }

    #[test]
    fn a_failed_replace_removes_the_temporary_file() {
        let dir = TempDir::new("atomic-fail");
        let sub = dir.path("sub");
        fs::create_dir(&sub).unwrap();
        fs::write(sub.join("keep"), b"x").unwrap();
        let e = write(&sub, &[b"data"]).unwrap_err();
        assert_eq!(e.action, "replace the file", "{e}");
        assert!(
            e.to_string().starts_with("cannot replace the file: "),
            "{e}"
        );
        assert_eq!(dir.entries(), ["sub"]);
        let e = write(dir.path("missing/out.bin"), &[b"data"]).unwrap_err();
        assert_eq!(e.action, "create a temporary file next to it", "{e}");
    }
}
