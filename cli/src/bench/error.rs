//! What stops a benchmark run.

use std::fmt;

/// A benchmark run that could not finish.
#[derive(Debug)]
pub enum Error {
    /// The library refused or failed a call.
    Library(scatterjit::Error),
    /// The run itself failed: an engine disagreed with the interpreter, a thread pool could
    /// not start, the chart could not be written.
    Run(String),
}

/// The result of a benchmark step.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Library(e) => e.fmt(f),
            Error::Run(message) => write!(f, "bench: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Library(e) => Some(e),
            Error::Run(_) => None,
        }
    }
}

impl From<scatterjit::Error> for Error {
    fn from(e: scatterjit::Error) -> Self {
        Error::Library(e)
    }
}

impl From<scatterjit::ir::Error> for Error {
    fn from(e: scatterjit::ir::Error) -> Self {
        Error::Library(e.into())
    }
}
