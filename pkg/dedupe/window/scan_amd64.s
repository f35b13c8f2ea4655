//go:build amd64 && !purego

#include "textflag.h"

// Offsets of scanParams's fields.
#define P_IDMASK 0
#define P_ID1 8
#define P_ID2 16
#define P_COMMIT 24
#define P_T 32
#define P_STAMPMASK 40
#define P_LO 48
#define P_SPAN 56

// QUAD classifies the four words at off(AX) against identity ID and leaves
// their match bits in MATCH and their free bits in FREE, 4 bits each:
//
//	Y1 = x == 0                           empty
//	Y2 = (x & idMask) == ID &^ Y1         match
//	Y3 = ((t - x) & stampMask) - lo       age - lo, signed: ages are < 2^40
//	Y4 = Y3 > -1 && span > Y3             expired
//	Y5 = (x & commitBit) == commitBit     committed
//	free = Y1 | (Y4 & Y5)
#define QUAD(off, ID, MATCH, FREE) \
	VMOVDQU   off(AX), Y0 \
	VPCMPEQQ  Y0, Y15, Y1 \
	VPAND     Y0, Y8, Y2 \
	VPCMPEQQ  Y2, ID, Y2 \
	VPANDN    Y2, Y1, Y2 \
	VMOVMSKPD Y2, MATCH \
	VPSUBQ    Y0, Y11, Y3 \
	VPAND     Y3, Y12, Y3 \
	VPSUBQ    Y13, Y3, Y3 \
	VPCMPGTQ  Y14, Y3, Y4 \
	VPCMPGTQ  Y3, Y7, Y5 \
	VPAND     Y4, Y5, Y4 \
	VPAND     Y0, Y10, Y5 \
	VPCMPEQQ  Y5, Y10, Y5 \
	VPAND     Y4, Y5, Y4 \
	VPOR      Y4, Y1, Y4 \
	VMOVMSKPD Y4, FREE

// func scanAVX2(xs *[16]uint64, p *scanParams) (match, free uint32)
TEXT ·scanAVX2(SB), NOSPLIT, $0-24
	MOVQ xs+0(FP), AX
	MOVQ p+8(FP), BX
	VPBROADCASTQ P_IDMASK(BX), Y8
	VPBROADCASTQ P_ID1(BX), Y9
	VPBROADCASTQ P_ID2(BX), Y6
	VPBROADCASTQ P_COMMIT(BX), Y10
	VPBROADCASTQ P_T(BX), Y11
	VPBROADCASTQ P_STAMPMASK(BX), Y12
	VPBROADCASTQ P_LO(BX), Y13
	VPBROADCASTQ P_SPAN(BX), Y7
	VPXOR        Y15, Y15, Y15
	VPCMPEQQ     Y14, Y14, Y14 // all ones: -1

	QUAD(0, Y9, R8, R9)
	QUAD(32, Y9, R10, R11)
	SHLQ $4, R10
	SHLQ $4, R11
	ORQ  R10, R8
	ORQ  R11, R9
	QUAD(64, Y6, R10, R11)
	SHLQ $8, R10
	SHLQ $8, R11
	ORQ  R10, R8
	ORQ  R11, R9
	QUAD(96, Y6, R10, R11)
	SHLQ $12, R10
	SHLQ $12, R11
	ORQ  R10, R8
	ORQ  R11, R9

	VZEROUPPER
	MOVL R8, match+16(FP)
	MOVL R9, free+20(FP)
	RET
