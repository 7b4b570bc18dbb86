"""The Flower ClientApp: a thin adapter from Flower messages to fed.runtime.node.NodeHost."""
