//! What repeated calls keep: the bindings of the few geometries a caller's calls repeat
//! (a model calls one kernel at a few nodes of different shapes). A geometry is kept on its
//! second call among the last few misses (the first only leaves its hash), so that calls
//! whose shapes never repeat pay a hash, not a binding. Kernels keep their views' geometries
//! this way (`kernel::memo`), and the C ABI's kernel handles their descriptors'.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many geometries one owner keeps, and how many misses it remembers.
const KEPT: usize = 4;

/// Calls with at least this many elements in an operand spend far more time on their work
/// than on binding it, and are not kept.
pub(crate) const KEPT_BELOW: usize = 1 << 16;

/// The hash [`Recent::missed`] takes, of a geometry's fields: a multiply-rotate hash (as
/// rustc's FxHash), a few instructions a word where the standard library's SipHash spent
/// about 2,500 on a C call's four descriptors, on every call that missed. Collisions are
/// harmless: a geometry that collides with a recent miss is bound one miss early, and kept
/// bindings are matched field for field, never by hash.
pub(crate) fn geometry_hash(geometry: &(impl Hash + ?Sized)) -> u64 {
    let mut hasher = GeometryHasher(0);
    geometry.hash(&mut hasher);
    hasher.finish()
}

/// The state of [`geometry_hash`]: each word rotated in and multiplied by an odd constant.
/// Also the hasher of maps whose keys are such hashes already.
#[derive(Default)]
pub(crate) struct GeometryHasher(u64);

impl GeometryHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for GeometryHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            self.add(u64::from_le_bytes(word.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(n.into());
    }

    fn write_u32(&mut self, n: u32) {
        self.add(n.into());
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// The kept bindings of one kernel or handle.
pub(crate) struct Recent<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    kept: [Option<Arc<T>>; KEPT],
    /// Where the next binding goes, round robin.
    next: usize,
    /// The hashes of the geometries of the latest misses, round robin.
    misses: [Option<u64>; KEPT],
    next_miss: usize,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent {
            state: Mutex::new(State {
                kept: Default::default(),
                next: 0,
                misses: [None; KEPT],
                next_miss: 0,
            }),
        }
    }
}

impl<T> Recent<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // A panic cannot leave `State` half-updated: every update is one assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept binding that `matches`, if any.
    pub(crate) fn find(&self, matches: impl Fn(&T) -> bool) -> Option<Arc<T>> {
        let state = self.state();
        state.kept.iter().flatten().find(|b| matches(b)).cloned()
    }

    /// Records a miss of the geometry hashed as `hash`: true when it is the second among
    /// the latest misses, when the caller should bind it and [`Self::keep`] the binding.
    pub(crate) fn missed(&self, hash: u64) -> bool {
        let mut state = self.state();
        match state.misses.iter().position(|&h| h == Some(hash)) {
            Some(seen) => {
                state.misses[seen] = None;
                true
            }
            None => {
                let slot = state.next_miss;
                state.misses[slot] = Some(hash);
                state.next_miss = (slot + 1) % KEPT;
                false
            }
        }
    }

    /// Keeps `binding` in place of a kept one that `same` matches (one of the same
    /// geometry that no longer serves), or else in the next slot round robin.
    pub(crate) fn keep(&self, binding: T, same: impl Fn(&T) -> bool) {
        let mut state = self.state();
        let stale = state
            .kept
            .iter()
            .position(|kept| kept.as_deref().is_some_and(&same));
        let slot = stale.unwrap_or(state.next);
        if stale.is_none() {
            state.next = (slot + 1) % KEPT;
        }
        state.kept[slot] = Some(Arc::new(binding));
    }

    /// How many bindings are kept.
    pub(crate) fn kept(&self) -> usize {
        self.state().kept.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_geometry_is_kept_on_its_second_miss() {
        let recent = Recent::<u64>::default();
        assert!(!recent.missed(7));
        assert!(!recent.missed(8));
        assert!(recent.missed(7));
        recent.keep(7, |&k| k == 7);
        assert_eq!(recent.find(|&k| k == 7).as_deref(), Some(&7));
        assert!(recent.find(|&k| k == 8).is_none());
        // Its hash was forgotten when it was bound: a miss of it starts over.
        assert!(!recent.missed(7));
    }

    #[test]
    fn geometry_hashes_tell_geometries_apart() {
        let shapes: [&[usize]; 5] = [&[2, 3], &[3, 2], &[2, 3, 1], &[6], &[]];
        let hashes: Vec<u64> = shapes.iter().map(geometry_hash).collect();
        for (i, a) in hashes.iter().enumerate() {
            assert_eq!(*a, geometry_hash(&shapes[i]));
            assert!(
                hashes[i + 1..].iter().all(|b| b != a),
                "{shapes:?}: {hashes:?}"
            );
        }
        // Bytes past the last whole word count too.
        assert_ne!(geometry_hash(&[1u8; 9][..]), geometry_hash(&[1u8; 8][..]));
        assert_ne!(geometry_hash(&(1u32, -1i64)), geometry_hash(&(1u32, 1i64)));
    }

    #[test]
    fn only_the_latest_misses_and_bindings_are_kept() {
        let recent = Recent::<u64>::default();
        for hash in 0..=KEPT as u64 {
            assert!(!recent.missed(hash));
        }
        // Hash 0 was pushed out by the last of the misses after it.
        assert!(!recent.missed(0));
        for k in 0..=KEPT as u64 {
            recent.keep(k, |&kept| kept == k);
        }
        assert_eq!(recent.kept(), KEPT);
        assert!(recent.find(|&k| k == 0).is_none());
        // A binding of a kept geometry replaces it instead of taking another slot.
        recent.keep(KEPT as u64, |&kept| kept == KEPT as u64);
        assert_eq!(recent.kept(), KEPT);
        assert!(recent.find(|&k| k == 1).is_some());
    }
}
