/**
 * This process among the nodes sharing one database: what tells its rows (conversation leases,
 * stream slots) from other nodes', a suffix counting each one it takes.
 */
export const NODE_ID = `${process.pid}-${crypto.randomUUID().slice(0, 8)}`;
