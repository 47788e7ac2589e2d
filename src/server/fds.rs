//! The open-file limit: raised to its hard maximum at start (as Go's runtime does), and the
//! listeners' caps fitted under it, so that a full listener sheds a connection instead of
//! failing `accept` with EMFILE. Containers often start with a soft limit of 1024
//! (containerd 2 no longer raises it).

use std::io;

use rustix::process::{Resource, getrlimit, setrlimit};

use super::conns::MAX_SHEDDING;

/// File descriptors kept for everything but the capped connections: the listeners, the
/// certificate files, the Kubernetes client, the standard streams, and on each listener
/// up to [`MAX_SHEDDING`] connections that were shed and are not closed yet.
pub const RESERVE: u64 = 64 + 2 * MAX_SHEDDING as u64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit now in
/// force (`None`: unlimited).
pub fn raise_nofile_limit() -> io::Result<Option<u64>> {
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        setrlimit(Resource::Nofile, limit)?;
    }
    Ok(getrlimit(Resource::Nofile).current)
}

/// Lowers the connection caps, if needed, so that both listeners full plus [`RESERVE`] fit
/// in `limit` file descriptors; the admin listener keeps at most a quarter of what is
/// left. Returns whether it lowered them.
pub fn fit_caps(limit: u64, webhook: &mut usize, admin: &mut usize) -> bool {
    let need = (*webhook as u64)
        .saturating_add(*admin as u64)
        .saturating_add(RESERVE);
    if need <= limit {
        return false;
    }
    let available = usize::try_from(limit.saturating_sub(RESERVE)).unwrap_or(usize::MAX);
    *admin = (*admin).min(available / 4).max(1);
    *webhook = available.saturating_sub(*admin).max(1);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_fit_under_the_limit() {
        let (mut w, mut a) = (512, 64);
        assert!(!fit_caps(576 + RESERVE, &mut w, &mut a));
        assert_eq!((w, a), (512, 64));
        // 1,024 descriptors (a container's usual hard limit) less the reserve.
        assert_eq!(RESERVE, 320);
        let (mut w, mut a) = (1024, 64);
        assert!(fit_caps(1024, &mut w, &mut a));
        assert_eq!((w, a), (640, 64));
        let (mut w, mut a) = (1024, 64);
        assert!(fit_caps(384, &mut w, &mut a));
        assert_eq!((w, a), (48, 16));
        let (mut w, mut a) = (1024, 64);
        assert!(fit_caps(10, &mut w, &mut a));
        assert_eq!((w, a), (1, 1));
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let soft = raise_nofile_limit().unwrap();
        assert_eq!(soft, getrlimit(Resource::Nofile).maximum);
    }
}
