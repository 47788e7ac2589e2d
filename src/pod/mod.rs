//! The pod as the engine sees it: the injection annotations (namespace-vs-pod precedence,
//! container targeting), what can be derived about the pod without an API call, and the plan
//! of edits over the borrowed original from which the patch is built.

pub mod env;
pub mod info;
pub mod names;
pub mod plan;
pub mod select;
pub mod valid;
