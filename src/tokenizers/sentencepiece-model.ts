/** Reads the parts of a SentencePiece `.model` file (a `ModelProto`) that the runtime library does not expose. */
import protobuf from 'protobufjs';

/** Piece types of `ModelProto.SentencePiece.Type`. */
export const PieceType = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

/** One vocabulary entry. */
export interface Piece {
  piece: string;
  score: number;
  type: number;
}

/** What Chorus needs of a SentencePiece model. */
export interface SentencePieceModelInfo {
  pieces: Piece[];
  unkId: number;
  bosId: number;
  eosId: number;
  padId: number;
  addDummyPrefix: boolean;
}

// A subset of sentencepiece_model.proto (Apache-2.0, google/sentencepiece): field numbers and defaults.
const PROTO = `
syntax = "proto2";
message ModelProto {
  message SentencePiece {
    optional string piece = 1;
    optional float score = 2;
    optional int32 type = 3 [default = 1];
  }
  message TrainerSpec {
    optional int32 unk_id = 40 [default = 0];
    optional int32 bos_id = 41 [default = 1];
    optional int32 eos_id = 42 [default = 2];
    optional int32 pad_id = 43 [default = -1];
  }
  message NormalizerSpec {
    optional bool add_dummy_prefix = 3 [default = true];
  }
  repeated SentencePiece pieces = 1;
  optional TrainerSpec trainer_spec = 2;
  optional NormalizerSpec normalizer_spec = 3;
}`;

let modelType: protobuf.Type | undefined;

/** Decodes a `.model` file's bytes. */
export function readSentencePieceModel(bytes: Uint8Array): SentencePieceModelInfo {
  modelType ??= protobuf.parse(PROTO).root.lookupType('ModelProto');
  const message = modelType.decode(bytes);
  const model = modelType.toObject(message, { defaults: true }) as {
    pieces: Piece[];
    trainerSpec?: { unkId: number; bosId: number; eosId: number; padId: number };
    normalizerSpec?: { addDummyPrefix: boolean };
  };
  const trainer = model.trainerSpec ?? { unkId: 0, bosId: 1, eosId: 2, padId: -1 };
  return {
    pieces: model.pieces,
    unkId: trainer.unkId,
    bosId: trainer.bosId,
    eosId: trainer.eosId,
    padId: trainer.padId,
    addDummyPrefix: model.normalizerSpec?.addDummyPrefix ?? true,
  };
}
