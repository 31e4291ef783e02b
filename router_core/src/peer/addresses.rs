//! Engine ids are this replica's own (the order it added them); peers name engines by the
//! address every router dials, so the exchange keeps both directions.

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct EngineAddresses {
    by_id: HashMap<u32, String>,
    by_address: HashMap<String, u32>,
}

impl EngineAddresses {
    /// Engine `id` is at `address` (replacing what either was before).
    pub fn set(&mut self, id: u32, address: &str) {
        self.remove(id);
        if let Some(old) = self.by_address.insert(address.to_owned(), id) {
            self.by_id.remove(&old);
        }
        self.by_id.insert(id, address.to_owned());
    }

    pub fn remove(&mut self, id: u32) {
        if let Some(address) = self.by_id.remove(&id) {
            self.by_address.remove(&address);
        }
    }

    pub fn address(&self, id: u32) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }

    pub fn id(&self, address: &str) -> Option<u32> {
        self.by_address.get(address).copied()
    }
}
