//! Buffers whose last byte sits right before an inaccessible page, so that generated code
//! reading or writing even one byte past a tensor's memory faults at once (valgrind does
//! not see a load whose value goes unused, such as the lines a row reads ahead).

use std::ops::{Deref, DerefMut};

/// Bytes that end where an inaccessible page begins (Linux: an anonymous mapping whose
/// last page is `PROT_NONE`).
pub struct Guarded {
    map: *mut libc::c_void,
    map_len: usize,
    start: *mut u8,
    len: usize,
}

impl Guarded {
    /// A copy of `bytes` ending at a guard page.
    pub fn new(bytes: &[u8]) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let data_pages = bytes.len().div_ceil(page).max(1);
        let map_len = (data_pages + 1) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap of {map_len} bytes failed");
        let guard = map as usize + data_pages * page;
        // SAFETY: the last page lies inside the mapping just made, which only we use.
        let protected =
            unsafe { libc::mprotect(guard as *mut libc::c_void, page, libc::PROT_NONE) };
        assert_eq!(protected, 0, "mprotect of the guard page failed");
        let start = (guard - bytes.len()) as *mut u8;
        // SAFETY: `start..guard` lies inside the readable and writable part of the mapping,
        // and `bytes` is another allocation.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), start, bytes.len()) };
        Guarded {
            map,
            map_len,
            start,
            len: bytes.len(),
        }
    }
}

// SAFETY: a `Guarded` owns its mapping as a `Box<[u8]>` owns its allocation: shared
// access only reads, and writing takes `&mut self`.
unsafe impl Send for Guarded {}
// SAFETY: as for `Send`.
unsafe impl Sync for Guarded {}

impl Deref for Guarded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `start..start + len` is mapped readable and writable for as long as
        // `self` lives, initialized by `new`, and borrowed through `self` only.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

impl DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this borrow the only one.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, whose bytes nothing borrows any more.
        unsafe { libc::munmap(self.map, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_the_bytes_up_to_the_guard() {
        let mut g = Guarded::new(&[1, 2, 3]);
        assert_eq!(&g[..], &[1, 2, 3]);
        g[2] = 9;
        assert_eq!(&g[..], &[1, 2, 9]);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        assert_eq!((g.as_ptr() as usize + g.len()) % page, 0);
        assert!(Guarded::new(&[]).is_empty());
    }
}
