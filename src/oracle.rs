//! The timestamp oracle (issue 4): under construction.
