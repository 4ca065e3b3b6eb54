//! The request pipeline: the stages every model call passes, whatever wire protocol it came in.

pub mod stream;
