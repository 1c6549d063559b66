/** KServe v2 tensor datatypes. */
export const DATATYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BF16', 'BYTES'] as const;

/** A KServe v2 tensor datatype. */
export type Datatype = (typeof DATATYPES)[number];
