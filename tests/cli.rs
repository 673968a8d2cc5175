//! CLI tests (being written).
