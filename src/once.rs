//! A cell that keeps only success: the compiled code of a pass, a cache slot's kernel.

use std::sync::{Mutex, OnceLock};

/// Filled by the first initializer that succeeds. A failed initialization is returned to
/// its caller and not kept, so the next caller tries again: a transient failure (code
/// memory exhausted, say) does not break a key for the rest of the process. Concurrent
/// first callers initialize one at a time; a read after success takes no lock.
pub(crate) struct OnceOk<T> {
    value: OnceLock<T>,
    init: Mutex<()>,
}

impl<T> Default for OnceOk<T> {
    fn default() -> Self {
        OnceOk {
            value: OnceLock::new(),
            init: Mutex::new(()),
        }
    }
}

impl<T> OnceOk<T> {
    /// The value, if an initializer has succeeded.
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// The value, running `init` first unless one already succeeded.
    pub(crate) fn get_or_try_init<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(value) = self.value.get() {
            return Ok(value);
        }
        let _one_at_a_time = self.init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = self.value.get() {
            return Ok(value); // another caller succeeded while this one waited
        }
        let value = init()?;
        Ok(self.value.get_or_init(|| value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_not_kept() {
        let cell = OnceOk::<u32>::default();
        assert_eq!(cell.get_or_try_init(|| Err("transient")), Err("transient"));
        assert_eq!(cell.get(), None);
        assert_eq!(cell.get_or_try_init(|| Ok::<_, &str>(7)), Ok(&7));
        assert_eq!(cell.get_or_try_init(|| Err("not called")), Ok(&7));
    }

    #[test]
    fn concurrent_callers_initialize_once() {
        let cell = OnceOk::<u32>::default();
        let calls = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let v = cell.get_or_try_init(|| {
                        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Ok::<_, ()>(3)
                    });
                    assert_eq!(v, Ok(&3));
                });
            }
        });
        assert_eq!(calls.into_inner(), 1);
    }
}
