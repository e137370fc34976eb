//! The seam's one error: a runtime's own message, passed through as it is.

/// A failure behind the seam: the runtime's own one-line message (what is missing and what to
/// try), a GPU selector that does not parse, an impossible staging configuration, or a copy
/// past a buffer's end.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct AccelError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl AccelError {
    /// Wraps a runtime's error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> AccelError {
        AccelError(Box::new(e))
    }

    /// The runtime's error, to be told apart (`downcast_ref::<cuda::CudaError>()`).
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.0.as_ref()
    }
}

impl From<crate::SelectorError> for AccelError {
    fn from(e: crate::SelectorError) -> AccelError {
        AccelError::new(e)
    }
}

impl From<crate::StagingError> for AccelError {
    fn from(e: crate::StagingError) -> AccelError {
        AccelError::new(e)
    }
}

/// A range of `len` bytes at `offset` that does not fit a buffer of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {len} bytes at offset {offset} do not fit a buffer of {size} bytes")]
pub struct OutOfBounds {
    /// The operation.
    pub what: &'static str,
    /// Where the range starts.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// The buffer's length.
    pub size: usize,
}

/// Checks that `offset .. offset + len` lies inside a buffer of `size` bytes.
pub fn check_range(
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<(), OutOfBounds> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(OutOfBounds {
            what,
            offset,
            len,
            size,
        }),
    }
}

/// Marker `marker` of a copy queue's `markers`, or the error naming how many there are.
pub fn nth_marker<T>(markers: &[T], marker: usize) -> Result<&T, OutOfBounds> {
    markers.get(marker).ok_or(OutOfBounds {
        what: "copy marker",
        offset: marker,
        len: 1,
        size: markers.len(),
    })
}

impl From<OutOfBounds> for AccelError {
    fn from(e: OutOfBounds) -> AccelError {
        AccelError::new(e)
    }
}
