// SPDX-License-Identifier: GPL-2.0

//! Raw bindgen output for the kernel APIs rdma_metaroce uses (see `gen-bindings.sh`).
//!
//! Generated per kernel build so that structure layouts always match the kernel the
//! module is loaded into. Nothing outside [`crate::ffi`] may use these items.

#![allow(
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unnecessary_transmutes,
    clippy::missing_safety_doc,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    clippy::ptr_as_ptr,
    clippy::ref_as_ptr,
    clippy::cast_lossless,
    clippy::as_underscore,
    clippy::ptr_cast_constness,
    clippy::as_ptr_cast_mut,
    rustdoc::all
)]

include!("bindings_generated.rs");
