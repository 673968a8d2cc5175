//! The reference interpreter (being written).
