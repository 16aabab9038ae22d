//! Unit tests of `wire::roce`: real rxe captures, round-trip properties, bad input.

mod corpus;
mod errors;
mod mpe;
mod props;
