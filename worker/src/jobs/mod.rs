//! What outlives the process: the job journal. [`journal::SqliteJournal`]
//! writes every accepted job down (with its witnesses) before it is
//! acknowledged and observes every partition's and job's end, so that a
//! restart loses no accepted job. The engine below knows nothing of it;
//! the service's intake writes to it and reads it back at start-up.
//! (The fleet's PostgreSQL queue, in `crate::fleet`, extends its schema.)

pub mod journal;
