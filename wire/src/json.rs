//! The JSON tools every codec shares: the structural walk (`skim`) the fast decoders and the
//! same-protocol path use, the serde decode that names the field at fault (`decode`), fast reads
//! (`read`), the one writer for bodies built by hand (`write`), and the request body in pieces
//! (`payload`).

pub mod decode;
pub mod payload;
pub mod read;
pub mod skim;
pub mod walk;
pub mod write;

pub use payload::{Payload, PayloadWriter};
