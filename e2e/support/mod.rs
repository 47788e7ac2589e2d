//! Shared by the end-to-end tests (`e2e/tests/`) and the demo (`e2e/demo.rs`): a real
//! control plane (etcd + kube-apiserver), the real `otel-injector serve` process and its
//! service-account identity, a second in-process webhook, and Kubernetes API helpers. Each
//! user uses a different part.
#![allow(dead_code)]

pub mod agent;
pub mod api;
pub mod certmanager;
pub mod chart;
pub mod collector;
pub mod controllers;
pub mod controlplane;
pub mod egress;
pub mod identity;
pub mod kubelet;
pub mod labeler;
pub mod process;
pub mod runner;
pub mod service;
#[path = "../../tests/support/text.rs"]
pub mod text;
pub mod tools;
pub mod webhook;
