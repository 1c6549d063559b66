// Types for `sentencepiece-js`, which ships none.
declare module 'sentencepiece-js' {
  class SentencePieceProcessor {
    load(path: string): Promise<void>;
    encodeIds(text: string): number[];
    encodePieces(text: string): string[];
    decodeIds(ids: number[]): string;
  }
  const sentencepiece: { SentencePieceProcessor: typeof SentencePieceProcessor };
  export default sentencepiece;
  export { SentencePieceProcessor };
}
