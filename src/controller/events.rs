//! Kubernetes Events, published through kube's `Recorder` with a bound on what it remembers.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Events one `Recorder` publishes before it is replaced by a fresh one.
pub const EVENTS_PER_RECORDER: u32 = 256;

/// Publishes Events as one reporter. kube's `Recorder` remembers every Event it published for
/// six minutes, whatever their number, so that a repeat is counted as a series, and scans them
/// all on every publish: after a burst (an Event on each new ApprovalRequest and its Agent,
/// 10 000 of each) that would be 20 000 Events of about 1 KB each, held until the next Event
/// (an estimate from their fields). A fresh `Recorder` every
/// [`EVENTS_PER_RECORDER`] Events bounds it; a repeat just after a renewal is created as a new
/// Event instead of counted in the series of the one before.
pub struct Events {
    client: Client,
    reporter: Reporter,
    per_recorder: u32,
    current: Mutex<Current>,
}

/// The recorder in use and how many Events it has published.
struct Current {
    recorder: Recorder,
    published: u32,
}

impl Events {
    /// Events published as `reporter`, a fresh recorder every `per_recorder` of them.
    pub fn new(client: Client, reporter: Reporter, per_recorder: u32) -> Self {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            per_recorder,
            current: Mutex::new(Current {
                recorder,
                published: 0,
            }),
        }
    }

    /// Publishes `event` on `target`.
    pub async fn publish(
        &self,
        event: &Event,
        target: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let recorder = {
            let mut current = self.current.lock().expect("not poisoned");
            if current.published >= self.per_recorder {
                *current = Current {
                    recorder: Recorder::new(self.client.clone(), self.reporter.clone()),
                    published: 0,
                };
            }
            current.published += 1;
            current.recorder.clone()
        };
        recorder.publish(event, target).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hitl_test_kit::mock;
    use http::Method;
    use kube::runtime::events::EventType;

    #[tokio::test]
    async fn a_repeat_is_a_series_until_the_recorder_is_renewed() {
        let (client, mut apiserver) = mock::pair("default");
        let events = Events::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
            3,
        );
        let event = Event {
            type_: EventType::Normal,
            reason: "Seen".into(),
            note: None,
            action: "Test".into(),
            secondary: None,
        };
        let target = ObjectReference {
            kind: Some("Agent".into()),
            namespace: Some("ns".into()),
            name: Some("a".into()),
            ..ObjectReference::default()
        };
        let server = tokio::spawn(async move {
            let mut methods = Vec::new();
            // Each write is answered with what was written.
            while let Some(call) = apiserver.try_next().await {
                methods.push(call.method);
                call.reply.respond(200, &call.body);
            }
            methods
        });
        for _ in 0..4 {
            events.publish(&event, &target).await.unwrap();
        }
        drop(events);
        assert_eq!(
            server.await.unwrap(),
            [Method::POST, Method::PATCH, Method::PATCH, Method::POST]
        );
    }
}
