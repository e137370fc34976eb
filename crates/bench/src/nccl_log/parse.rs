//! The lines of an `NCCL_DEBUG=INFO` log that say which path each GPU took, read into
//! [`Event`]s. A line is `HOST:PID:TID [DEV] NCCL INFO MESSAGE` (NCCL 2.x; `DEV` the CUDA
//! device of the thread that printed it); other lines are skipped, so a merged log with the
//! application's own output in between reads as well as one file per rank.

/// Which process and GPU printed a line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Source {
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The CUDA device index the printing thread had (`[DEV]`).
    pub dev: u32,
}

/// How a channel's edge goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Through a network plugin (`NET/IB/3/GDRDMA`, `NET/IBext_v8/2`, `NET/Socket/0`).
    Net {
        /// The plugin's name: "IB", "IBext_v8", "Socket".
        plugin: String,
        /// The NIC's index in the plugin's list (`NET/IB : Using [i]...`).
        nic: u32,
        /// `GDRDMA`: the NIC reads and writes GPU memory directly.
        gdr: bool,
    },
    /// Inside the node: `P2P/IPC`, `P2P/CUMEM/read`, `P2P/direct pointer`, `SHM`, ...
    Local(String),
}

/// One thing a line says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// `comm 0x... rank R nranks N cudaDev D ... busId B`: this process's GPU D is rank R of
    /// a communicator, at PCI bus id B.
    Rank {
        /// The rank.
        rank: u32,
        /// Its CUDA device.
        cuda_dev: u32,
        /// NCCL's bus id ("1b000", "0000:1b:00.0").
        bus_id: Option<String>,
    },
    /// `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...`: a plugin's NICs by index.
    Nics {
        /// The plugin: "IB", "IBext_v8", "Socket".
        plugin: String,
        /// Its devices by index.
        list: Vec<(u32, String)>,
    },
    /// `Channel 01/0 : 2[c7000] -> 0[87000] [send] via NET/IB/5/GDRDMA`: this GPU's edge.
    Channel {
        /// The rank on this GPU.
        local: u32,
        /// The rank at the other end.
        peer: u32,
        /// Whether this GPU sends on it (else receives).
        send: bool,
        /// How.
        via: Transport,
    },
    /// `GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (...)` or `... Enabled ...`: NCCL's word
    /// on GPUDirect RDMA with NIC `nic`, and the line's text.
    Gdr {
        /// The plugin whose NIC it is ("IB" unless the line names another).
        plugin: String,
        /// The NIC's index.
        nic: u32,
        /// Enabled.
        enabled: bool,
        /// What NCCL said.
        text: String,
    },
}

/// The source and message of an NCCL INFO line; `None` for any other line.
pub(crate) fn split(line: &str) -> Option<(Source, &str)> {
    let (prefix, message) = line.split_once(" NCCL INFO ")?;
    let (ident, dev) = prefix.trim().rsplit_once(" [")?;
    let dev = dev.strip_suffix(']')?.parse().ok()?;
    let mut parts = ident.rsplitn(3, ':');
    let (_tid, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    // A launcher's prefix ("[1,0]<stdout>:", a timestamp and a space) is not the host.
    let host = host.rsplit([' ', ':', '>']).next()?.to_string();
    Some((
        Source {
            host,
            pid: pid.parse().ok()?,
            dev,
        },
        message.trim(),
    ))
}

/// What `message` says, when it is one of the lines this reads.
pub(crate) fn event(message: &str) -> Option<Event> {
    if let Some(rest) = message.strip_prefix("Channel ") {
        return channel(rest);
    }
    if message.contains("GPU Direct RDMA") && message.contains(" HCA ") {
        return gdr(message);
    }
    if message.starts_with("NET/") && message.contains(" : Using ") {
        return nics(message);
    }
    if message.contains(" rank ") && message.contains(" cudaDev ") {
        return rank(message);
    }
    None
}

/// The word after `key` among `words`.
fn after<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words
        .iter()
        .position(|w| *w == key)
        .and_then(|i| words.get(i + 1).copied())
}

fn rank(message: &str) -> Option<Event> {
    let words: Vec<&str> = message.split_whitespace().collect();
    Some(Event::Rank {
        rank: after(&words, "rank")?.parse().ok()?,
        cuda_dev: after(&words, "cudaDev")?.parse().ok()?,
        bus_id: after(&words, "busId").map(str::to_string),
    })
}

/// "IB" of "NET/IB : ...", when the message starts so.
fn plugin_of(message: &str) -> Option<String> {
    let (head, _) = message.strip_prefix("NET/")?.split_once(" :")?;
    Some(head.trim().to_string())
}

fn nics(message: &str) -> Option<Event> {
    let plugin = plugin_of(message)?;
    let (_, list) = message.split_once(" : Using ")?;
    let list = list.split(';').next().unwrap_or(list);
    let found: Vec<(u32, String)> = list
        .split_whitespace()
        .filter_map(|w| {
            let (index, rest) = w.strip_prefix('[')?.split_once(']')?;
            let name = rest.split(':').next().filter(|n| !n.is_empty())?;
            Some((index.parse().ok()?, name.to_string()))
        })
        .collect();
    (!found.is_empty()).then_some(Event::Nics {
        plugin,
        list: found,
    })
}

/// "2[c7000]" or "2" as the rank.
fn rank_of(word: &str) -> Option<u32> {
    word.split('[').next()?.parse().ok()
}

fn channel(rest: &str) -> Option<Event> {
    let (_, edge) = rest.split_once(" : ")?;
    let (ends, via) = edge.split_once(" via ")?;
    let words: Vec<&str> = ends.split_whitespace().collect();
    let (from, to) = (rank_of(words.first()?)?, rank_of(words.get(2)?)?);
    if words.get(1) != Some(&"->") {
        return None;
    }
    // A NET edge says which end this line is; a P2P or SHM edge is printed by its sender.
    let send = words.get(3) != Some(&"[receive]");
    let (local, peer) = if send { (from, to) } else { (to, from) };
    Some(Event::Channel {
        local,
        peer,
        send,
        via: transport(via.trim())?,
    })
}

/// "NET/IB/5/GDRDMA", "NET/IB/0(4)/GDRDMA/Shared", "NET/Socket/1", "P2P/IPC/read", "SHM".
fn transport(via: &str) -> Option<Transport> {
    let Some(net) = via.strip_prefix("NET/") else {
        return Some(Transport::Local(via.to_string()));
    };
    let mut parts = net.split('/');
    let plugin = parts.next()?.to_string();
    let index = parts.next()?;
    let digits: String = index.chars().take_while(char::is_ascii_digit).collect();
    Some(Transport::Net {
        plugin,
        nic: digits.parse().ok()?,
        gdr: parts.any(|p| p == "GDRDMA"),
    })
}

fn gdr(message: &str) -> Option<Event> {
    let enabled = message.contains("GPU Direct RDMA Enabled");
    if !enabled && !message.contains("GPU Direct RDMA Disabled") {
        return None;
    }
    let (_, hca) = message.split_once(" HCA ")?;
    let digits: String = hca.chars().take_while(char::is_ascii_digit).collect();
    Some(Event::Gdr {
        plugin: plugin_of(message).unwrap_or_else(|| "IB".to_string()),
        nic: digits.parse().ok()?,
        enabled,
        text: message.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_info_line_gives_its_source_and_message() {
        let (s, m) = split("node-a:120890:121560 [3] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA").unwrap();
        assert_eq!((s.host.as_str(), s.pid, s.dev), ("node-a", 120890, 3));
        assert!(m.starts_with("Channel 01"));
        assert!(split("NCCL version 2.18.1+cuda12.1").is_none());
        assert!(split("node-a:1:2 [0] NCCL WARN Call to ibv_create_qp failed").is_none());
        // A launcher's prefix before the host ("[1,0]<stdout>:") is not the host.
        let (s, _) = split("[1,0]<stdout>:node-b:77:78 [0] NCCL INFO SHM").unwrap();
        assert_eq!(s.host, "node-b");
    }

    #[test]
    fn channels_name_their_end_and_their_path() {
        let e = event("Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA").unwrap();
        assert_eq!(
            e,
            Event::Channel {
                local: 0,
                peer: 2,
                send: false,
                via: Transport::Net {
                    plugin: "IB".into(),
                    nic: 5,
                    gdr: true
                }
            }
        );
        let e = event("Channel 00/1 : 0[0] -> 8[0] [send] via NET/IB/0(4)/GDRDMA/Shared").unwrap();
        assert!(matches!(
            e,
            Event::Channel {
                local: 0,
                send: true,
                via: Transport::Net {
                    nic: 0,
                    gdr: true,
                    ..
                },
                ..
            }
        ));
        let e = event("Channel 03/0 : 47[7] -> 39[7] [receive] via NET/IBext_v8/2").unwrap();
        assert!(matches!(
            e,
            Event::Channel {
                local: 39,
                via: Transport::Net {
                    nic: 2,
                    gdr: false,
                    ..
                },
                ..
            }
        ));
        let e = event("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read").unwrap();
        assert_eq!(
            e,
            Event::Channel {
                local: 0,
                peer: 1,
                send: true,
                via: Transport::Local("P2P/CUMEM/read".into())
            }
        );
    }

    #[test]
    fn nics_ranks_and_gdr_words_are_read() {
        let e =
            event("NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>")
                .unwrap();
        assert_eq!(
            e,
            Event::Nics {
                plugin: "IB".into(),
                list: vec![(0, "mlx5_0".into()), (1, "mlx5_1".into())]
            }
        );
        let e = event("comm 0x55cc8aa86c70 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 1c000 commId 0x65 - Init START").unwrap();
        assert_eq!(
            e,
            Event::Rank {
                rank: 3,
                cuda_dev: 3,
                bus_id: Some("1c000".into())
            }
        );
        let e = event("NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'").unwrap();
        assert!(
            matches!(e, Event::Gdr { nic: 1, enabled: false, ref plugin, .. } if plugin == "IB")
        );
        let e = event(
            "GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 4 <= 4), read 0 mode Default",
        )
        .unwrap();
        assert!(matches!(
            e,
            Event::Gdr {
                nic: 0,
                enabled: true,
                ..
            }
        ));
        assert!(event("Using network IB").is_none());
    }
}
