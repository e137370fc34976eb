//! The one error type of this crate: each variant says what failed, with the value, and what to try.

use std::io;

/// Everything that can go wrong between asking for a device and polling a completion.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// libibverbs.so.1 could not be loaded at run time.
    #[error(
        "libibverbs.so.1 could not be loaded; install rdma-core \
         (Debian/Ubuntu: apt-get install libibverbs1 ibverbs-providers)"
    )]
    LibraryMissing,

    /// The library loaded but lists no device.
    #[error(
        "no RDMA device found; is rdma-core installed and a NIC driver (or rdma_rxe) loaded? \
         `rdma link` lists devices"
    )]
    NoDevice,

    /// Devices exist, but none has an ACTIVE port.
    #[error(
        "no RDMA device has an ACTIVE port (found: {found}); check cables, `ibstat` or `rdma link`"
    )]
    NoActivePort {
        /// The devices that were seen, with their port states.
        found: String,
    },

    /// The named device does not exist.
    #[error("RDMA device '{name}' not found; available: {available}")]
    DeviceNotFound {
        /// The name that was asked for.
        name: String,
        /// The names that exist.
        available: String,
    },

    /// The port number is not one the device has.
    #[error("port {port} does not exist on {device}: valid ports are 1 to {count}")]
    BadPort {
        /// The device name.
        device: String,
        /// The port asked for.
        port: u8,
        /// How many ports the device has.
        count: u8,
    },

    /// The port is not ACTIVE.
    #[error(
        "port {port} of {device} is {state}, not ACTIVE; check the link (`rdma link`, `ibstat`)"
    )]
    PortNotActive {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// Its state.
        state: String,
    },

    /// The GID index is empty or out of range.
    #[error(
        "GID index {index} is not usable on {device} port {port}: {reason}; valid indexes: {valid}"
    )]
    BadGidIndex {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
        /// The index asked for.
        index: u32,
        /// Why it is not usable.
        reason: String,
        /// The indexes that hold a GID.
        valid: String,
    },

    /// A RoCE port has no GID at all, so no connection can be addressed.
    #[error("{device} port {port} has no GID; on RoCE, give its netdev an IP address")]
    NoGid {
        /// The device name.
        device: String,
        /// The port number.
        port: u8,
    },

    /// A verbs call failed.
    #[error("{call} failed: {reason}")]
    Call {
        /// The verbs function (or step) that failed.
        call: &'static str,
        /// The operating system's reason (part of the message, so not also a `source`).
        reason: io::Error,
    },

    /// `ibv_reg_dmabuf_mr` said the NIC's driver (or the kernel) has no dma-buf support at
    /// all: EOPNOTSUPP or EPROTONOSUPPORT.
    #[error(
        "the RDMA driver cannot register this memory as a dma-buf ({reason}): the NIC's driver \
         does not support dma-buf memory regions (rxe and older mlx5 kernels do not); use \
         the GPU's peer memory (--mem cuda-peermem with nvidia-peermem, rocm-peermem with \
         amdgpu) or its staged mode (--mem cuda-staged, rocm-staged)"
    )]
    DmaBufUnsupported {
        /// What ibv_reg_dmabuf_mr said, with its errno.
        reason: String,
    },

    /// Data Direct (`--mem cuda-data-direct`) cannot be used on this device: libmlx5 too old or
    /// absent, not an mlx5 device, or an mlx5 device without a Data Direct function.
    #[error(
        "Data Direct is not available on {device}: {reason}; Data Direct needs an mlx5 device with a \
         Data Direct function (ConnectX-8 on Grace-based systems) and rdma-core 54 or newer; use --mem \
         cuda-pcie or cuda (dma-buf) instead"
    )]
    DataDirectUnavailable {
        /// The RDMA device.
        device: String,
        /// Why not.
        reason: String,
    },

    /// `ibv_reg_dmabuf_mr` failed for another reason than a driver without dma-buf support: a
    /// bad fd or range (EINVAL, EBADF), pinned-memory limits (ENOMEM, EFAULT), permissions.
    #[error(
        "ibv_reg_dmabuf_mr failed: {reason}: not a driver without dma-buf support (that says \
         EOPNOTSUPP); check the exported fd and range, and the locked-memory limit (ulimit -l)"
    )]
    DmaBufRefused {
        /// What ibv_reg_dmabuf_mr said, with its errno.
        reason: String,
        /// The errno.
        errno: i32,
    },

    /// A request does not fit what was set up: a bad length, an offset beyond a buffer.
    #[error("{0}")]
    InvalidRequest(String),

    /// A work completion came back with an error status.
    #[error("work request {wr_id} on QP {qp_num} completed with status '{status}' ({code}), vendor error {vendor_err:#x}")]
    WorkCompletion {
        /// The work request id.
        wr_id: u64,
        /// The local QP number.
        qp_num: u32,
        /// The status as libibverbs names it (`ibv_wc_status_str`).
        status: String,
        /// The numeric status.
        code: u32,
        /// The provider's own error code.
        vendor_err: u32,
    },
}

impl VerbsError {
    /// A failed verbs call that returned an errno value.
    pub(crate) fn errno(call: &'static str, code: i32) -> Self {
        VerbsError::Call {
            call,
            reason: io::Error::from_raw_os_error(code),
        }
    }

    /// Adds what was asked for to a failed call's message.
    pub(crate) fn with_hint(self, hint: String) -> Self {
        match self {
            VerbsError::Call { call, reason } => VerbsError::Call {
                call,
                reason: io::Error::new(reason.kind(), format!("{reason} ({hint})")),
            },
            other => other,
        }
    }

    /// What a failed `ibv_reg_dmabuf_mr` means, by its errno: "unsupported" only for
    /// EOPNOTSUPP and EPROTONOSUPPORT; any other errno (or none) is kept as it is.
    pub(crate) fn from_dmabuf_registration(err: &io::Error, call: &'static str) -> Self {
        let errno = err.raw_os_error();
        let reason = match errno {
            Some(code) => format!("{err} (errno {code})"),
            None => err.to_string(),
        };
        match errno {
            Some(libc::EOPNOTSUPP | libc::EPROTONOSUPPORT) => {
                VerbsError::DmaBufUnsupported { reason }
            }
            Some(errno) => VerbsError::DmaBufRefused { reason, errno },
            None => VerbsError::Call {
                call,
                reason: io::Error::other(reason),
            },
        }
    }

    /// A failed call whose error came from sideway.
    pub(crate) fn from_sideway(call: &'static str, err: impl std::error::Error) -> Self {
        let mut text = err.to_string();
        let mut cause = err.source();
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        VerbsError::Call {
            call,
            reason: io::Error::other(text),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = VerbsError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_port_names_the_valid_ports_in_words() {
        let e = VerbsError::BadPort {
            device: "mlx5_0".into(),
            port: 3,
            count: 2,
        };
        assert_eq!(
            e.to_string(),
            "port 3 does not exist on mlx5_0: valid ports are 1 to 2"
        );
    }

    #[test]
    fn a_dmabuf_registration_is_called_unsupported_only_for_eopnotsupp_and_keeps_its_errno() {
        for code in [libc::EOPNOTSUPP, libc::EPROTONOSUPPORT] {
            let e = VerbsError::from_dmabuf_registration(
                &io::Error::from_raw_os_error(code),
                "ibv_reg_dmabuf_mr",
            );
            assert!(matches!(e, VerbsError::DmaBufUnsupported { .. }), "{e}");
            let text = e.to_string();
            assert!(text.contains(&format!("(errno {code})")), "{text}");
            assert!(text.contains("does not support dma-buf"), "{text}");
        }
        for code in [
            libc::EINVAL,
            libc::ENOMEM,
            libc::EFAULT,
            libc::EBADF,
            libc::EPERM,
        ] {
            let e = VerbsError::from_dmabuf_registration(
                &io::Error::from_raw_os_error(code),
                "ibv_reg_dmabuf_mr",
            );
            assert!(
                matches!(e, VerbsError::DmaBufRefused { errno, .. } if errno == code),
                "{e}"
            );
            let text = e.to_string();
            assert!(text.contains(&format!("(errno {code})")), "{text}");
            assert!(!text.contains("does not support"), "{text}");
            assert!(text.contains("ulimit -l"), "{text}");
        }
    }
}
