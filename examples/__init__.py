"""examples: a real async GRPO-shaped trainer that embeds the journal, and the chaos driver."""
