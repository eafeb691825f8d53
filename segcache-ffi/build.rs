//! Gives libsegcache.so a versioned SONAME so that programs linked against it look for
//! `libsegcache.so.0` at run time (the ABI major version), as a distribution package would ship it.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" || target_os == "freebsd" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsegcache.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
