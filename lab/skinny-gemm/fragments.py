# A NumPy model of lab/skinny-gemm/skinny.cu's shared-memory layout and fragments, for one stage (64
# values of K) of one block, all 4 warps: the swizzled rows LoadStage writes, ldmatrix.x4 as PTX
# defines it (lane l gives the row address of matrix l / 8; lane l gets row l / 4, columns 2 (l % 4)
# and one more, of each matrix), and mma.m16n8k16's A, B and C fragments. Prints the largest error of
# the block's product against x W^T and the ldmatrix phases that would read a bank twice (both 0);
# then the int8 and 4-bit layouts' fragments against the values they stand for (0 wrong).
# Run: python3 lab/skinny-gemm/fragments.py
import numpy as np
rng=np.random.default_rng(0)
kM,kBN,kBK=64,128,64
rows=64
X=rng.standard_normal((kM,kBK)).astype(np.float32)
W=rng.standard_normal((kBN,kBK)).astype(np.float32)
def swz(row,chunk): return row*kBK + ((chunk ^ (row & 7))<<3)
a=np.zeros(kM*kBK,np.float32); b=np.zeros(kBN*kBK,np.float32)
for c in range(kM*8):
    row,chunk=c>>3,c&7; a[swz(row,chunk):swz(row,chunk)+8]=X[row,chunk*8:chunk*8+8]
for c in range(kBN*8):
    row,chunk=c>>3,c&7; b[swz(row,chunk):swz(row,chunk)+8]=W[row,chunk*8:chunk*8+8]
def ldmatrix_x4(smem, addr_of_lane):
    # returns r[lane][4] each a pair of values
    addrs=[addr_of_lane(l) for l in range(32)]
    out=[[None]*4 for _ in range(32)]
    for m in range(4):
        for l in range(32):
            r=l//4; cpair=2*(l%4)
            base=addrs[8*m+r]
            out[l][m]=(smem[base+cpair],smem[base+cpair+1])
    return out
Y=np.zeros((kM,kBN),np.float32)
for warp in range(4):
    acc=np.zeros((32,4,4,4),np.float32)
    for kk in range(kBK//16):
        af=[ldmatrix_x4(a, lambda l,m=m: swz(16*m+(l&15), 2*kk+(l>>4))) for m in range(4)]
        bf=[[None]*2 for _ in range(4)]
        bl=[ldmatrix_x4(b, lambda l,jj=jj: swz(32*warp+16*jj+(l&7)+((l>>4)<<3), 2*kk+((l>>3)&1))) for jj in range(2)]
        for m in range(4):
            # reconstruct A tile 16x16 from fragments and B 16x8 per j, do mma
            A=np.zeros((16,16)); 
            for l in range(32):
                g,t=l//4,l%4
                a0,a1,a2,a3=af[m][l]
                A[g,2*t:2*t+2]=a0; A[g+8,2*t:2*t+2]=a1; A[g,2*t+8:2*t+10]=a2; A[g+8,2*t+8:2*t+10]=a3
            for j in range(4):
                jj,half=j//2,j%2
                B=np.zeros((16,8))
                for l in range(32):
                    g,t=l//4,l%4
                    r=bl[jj][l]
                    b0,b1=(r[0],r[1]) if half==0 else (r[2],r[3])
                    B[2*t:2*t+2,g]=b0; B[2*t+8:2*t+10,g]=b1
                C=A@B
                for l in range(32):
                    g,t=l//4,l%4
                    acc[l,m,j,0]+=C[g,2*t]; acc[l,m,j,1]+=C[g,2*t+1]; acc[l,m,j,2]+=C[g+8,2*t]; acc[l,m,j,3]+=C[g+8,2*t+1]
    for l in range(32):
        g,t=l//4,l%4
        for m in range(4):
            for j in range(4):
                row=16*m+g; col=32*warp+8*j+2*t
                Y[row,col:col+2]=acc[l,m,j,0:2]; Y[row+8,col:col+2]=acc[l,m,j,2:4]
ref=X@W.T
print('max err', np.abs(Y-ref).max())
# bank conflict check for ldmatrix phases: each 8-lane group's 16B rows must cover distinct bank quads
def conflicts(addr_of_lane):
    bad=0
    for m in range(4):
        banks=set()
        for r in range(8):
            q=(addr_of_lane(8*m+r)*2//16)%8
            banks.add(q)
        bad+= 8-len(banks)
    return bad
print('A conflicts', sum(conflicts(lambda l,m=m,kk=kk: swz(16*m+(l&15), 2*kk+(l>>4))) for m in range(4) for kk in range(4)))
print('B conflicts', sum(conflicts(lambda l,jj=jj,kk=kk,w=w: swz(32*w+16*jj+(l&7)+((l>>4)<<3), 2*kk+((l>>3)&1))) for w in range(4) for jj in range(2) for kk in range(4)))

# The int8 layout: PermutedK within each row's 64 values, a lane's 16 bytes at 16 t of its fragment's
# row, word kk widened by WidenInt8 (x ^ 0x80 as the low byte of 1024's mantissa, less 1152) into the
# B fragment's pairs (values 2t, 2t+1 and 2t+8, 2t+9 of the 16).
def fragment_values_wrong(lane_values, value):
    # The values among lane_values(n, t) (for each kk, the lane's 4 of row n) that differ from value(n, k)
    # at k = 2t, 2t + 1, 2t + 8, 2t + 9 of the kk's 16, over every lane of the 4 warps' fragments.
    bad = 0
    for warp in range(4):
        for l in range(32):
            g, t = l // 4, l % 4
            for j in range(4):
                n = 32 * warp + 8 * j + g
                for kk, got in enumerate(lane_values(n, t)):
                    want = [value(n, 16 * kk + 2 * t + d) for d in (0, 1, 8, 9)]
                    bad += sum(1 for x, y in zip(got, want) if x != y)
    return bad
def permuted_k(k):
    kk, r = k // 16, k % 16
    return 16 * ((r & 7) >> 1) + 4 * kk + (r & 1) + (2 if r >= 8 else 0)
assert sorted(permuted_k(k) for k in range(64)) == list(range(64))
Q = rng.integers(-127, 128, size=(kBN, kBK))
qt = np.zeros(kBN * kBK, np.int64)
for n in range(kBN):
    for k in range(kBK):
        qt[n * kBK + permuted_k(k)] = Q[n, k]
def widen(byte_values):
    u = [(int(v) & 0xFF) ^ 0x80 for v in byte_values]
    halves = [np.array([0x6400 | b], np.uint16).view(np.float16)[0] for b in u]
    return [float(np.float16(h - np.float16(1152))) for h in halves]
def int8_lane(n, t):
    lane_bytes = qt[n * kBK + 16 * t: n * kBK + 16 * t + 16]
    return [widen(lane_bytes[4 * kk: 4 * kk + 4]) for kk in range(4)]
print('int8 fragment values wrong', fragment_values_wrong(int8_lane, lambda n, k: Q[n, k]))

# The 4-bit layout: PermutedK4 (a nibble index, low nibble first) within each row's 64 values; lane t's
# 8 bytes at 8 t as two words, each widened by WidenUint4: masks 0x000f000f and 0x00f000f0 of the word
# and of the word >> 8 over 1024's mantissa, less 1024 + zero (or times 1/16, less 64 + zero), times
# the scale; pairs 0..3 of word h are the B fragments' pairs of kk = 2h and 2h + 1.
def permuted_k4(k):
    kk, r = k // 16, k % 16
    return 16 * ((r & 7) >> 1) + 8 * (kk // 2) + 2 * (kk % 2) + (1 if r >= 8 else 0) + 4 * (r & 1)
assert sorted(permuted_k4(k) for k in range(64)) == list(range(64))
Q4 = rng.integers(0, 16, size=(kBN, kBK))
zero, scale = np.float16(5), np.float16(0.0123)
row_bytes = np.zeros((kBN, kBK // 2), np.int64)
for n in range(kBN):
    for k in range(kBK):
        p = permuted_k4(k)
        row_bytes[n, p // 2] |= int(Q4[n, k]) << (4 * (p % 2))
def h(bits): return np.array([bits], np.uint16).view(np.float16)[0]
def widen4(word):
    pairs = []
    for half in range(2):
        w = word >> (8 * half)
        lo, hi = (w & 0x000F000F) | 0x64006400, (w & 0x00F000F0) | 0x64006400
        first = [np.float16(np.float16(h((lo >> s) & 0xFFFF) - np.float16(1024 + 5)) * scale) for s in (0, 16)]
        second = [np.float16(np.float16(np.float32(h((hi >> s) & 0xFFFF)) / 16 - (64 + 5)) * scale) for s in (0, 16)]
        pairs += [first, second]
    return pairs
def int4_lane(n, t):
    b = row_bytes[n, 8 * t: 8 * t + 8]
    words = [int(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24), int(b[4] | b[5] << 8 | b[6] << 16 | b[7] << 24)]
    wide = widen4(words[0]) + widen4(words[1])
    return [wide[2 * kk] + wide[2 * kk + 1] for kk in range(4)]
print('int4 fragment values wrong', fragment_values_wrong(int4_lane, lambda n, k: np.float16(np.float16(Q4[n, k] - 5) * scale)))
