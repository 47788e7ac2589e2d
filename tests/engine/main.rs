//! The engine and everything around it, in process: each language's injection applied to
//! real pods (`inject_*`), crafted and amplifying pods (`hardening`), the outcome, delivery
//! modes, labels, the CRD, the offline commands, the fuzz corpora, the build information,
//! the layering of `src/`, the one home of the keys, one meaning per type name (`names`),
//! the form of docs/decisions.md (`docs`) and docs/architecture.md against the tree
//! (`layout_doc`).

#[path = "../support/engine.rs"]
mod common;

mod architecture;
mod bases;
mod build_info;
mod crd;
mod delivery;
mod docs;
mod fuzz_corpus;
mod hardening;
mod inject_apache;
mod inject_dotnet;
mod inject_go;
mod inject_java;
mod inject_languages;
mod inject_multi;
mod inject_nginx;
mod inject_nodejs;
mod inject_python;
mod keys;
mod keys_read;
mod labels;
mod layout_doc;
mod names;
mod naming;
mod offline;
mod outcome;
mod selectors;
mod v1beta1;
