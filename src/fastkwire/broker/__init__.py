"""fastkwire broker: a Kafka broker for tests, sans-IO at its core."""
