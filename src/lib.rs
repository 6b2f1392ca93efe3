//! haul: move very large data between hosts at the speed of the slowest of disk, network
//! and CPU, over parallel, encrypted, verified streams, without losing a byte.
//!
//! The binary (`src/main.rs`) is thin: it parses the command line into a
//! [`config::Config`] and calls [`cmd::run`]. See `docs/design.md` for the architecture.

pub mod cli;
pub mod cmd;
pub mod codec;
pub mod config;
pub mod error;
pub mod object;
pub mod pagecache;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod protocol;
pub mod receive;
pub mod remote;
pub mod resolve;
pub mod send;
pub mod session;
pub mod signals;
pub mod stdio;
pub mod store;
pub mod transport;

pub use error::{Error, Result};
